//go:build integration

package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshotDir = flag.String("dashboard.screenshots", "",
	"TestDashboard: write a full-page PNG of each page it checks into this folder (make screenshots)")

// chromiumPath returns the headless browser the dashboard tests drive: env
// OVSTREAM_CHROMIUM, else Debian's chromium. Missing, the test FAILS (never
// skips), saying how to install it: .ci/run installs it.
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("OVSTREAM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the dashboard tests need headless Chromium: apt-get install -y chromium " +
		"(.ci/run installs it), or set OVSTREAM_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser is one headless Chromium for a whole test: every page is loaded
// in its one tab. The machine's network is closed: every flag that makes
// Chromium reach out on its own is set.
type browser struct {
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() }) // before TempDir's cleanup: Chromium has exited
	if err := chromedp.Do(ctx); err != nil {      // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return &browser{ctx: ctx}
}

// open loads url and waits until the page drew what the API returned
// (body data-state ready), failing with the page's error message otherwise.
func (b *browser) open(t *testing.T, url string) {
	t.Helper()
	if state := b.load(t, url); state != "ready" {
		msg := eval[string](t, b, `document.getElementById("error").textContent`)
		t.Fatalf("%s: the page shows an error: %s", url, msg)
	}
}

// load loads url and waits until the page is no longer loading; it
// returns the body's data-state: ready, or error (the page shows it).
func (b *browser) load(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return b.settled(t, ctx, url)
}

// settled waits until the page loaded after a navigation is no longer
// loading and returns its data-state.
func (b *browser) settled(t *testing.T, ctx context.Context, what string) string {
	t.Helper()
	state, err := chromedp.Run(ctx, chromedp.Poll[string](
		`document.body && document.body.dataset.state !== "loading" && document.body.dataset.state`,
		chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		t.Fatalf("%s: the page did not finish loading: %v", what, err)
	}
	return state
}

// resize emulates a browser window of w x h CSS pixels for the pages
// opened next; 0, 0 returns to the window's own size.
func (b *browser) resize(t *testing.T, w, h int64) {
	t.Helper()
	a := chromedp.EmulateReset()
	if w > 0 {
		a = chromedp.EmulateViewport(w, h)
	}
	if err := chromedp.Do(b.ctx, a); err != nil {
		t.Fatalf("resize to %dx%d: %v", w, h, err)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// cell is one table cell as the page shows it: its text and, for numbers
// and times, the exact value of the API in data-v ("" when none).
type cell struct {
	Text string `json:"text"`
	V    string `json:"v"`
}

// tableRows returns the body rows of the table with that id.
func tableRows(t *testing.T, b *browser, id string) [][]cell {
	t.Helper()
	return eval[[][]cell](t, b, fmt.Sprintf(`[...document.querySelectorAll("#%s tbody tr")].map(tr =>
		[...tr.cells].map(td => ({text: td.textContent, v: td.dataset.v ?? ""})))`, id))
}

// chartInfo is what a uPlot chart of the page holds and drew.
type chartInfo struct {
	Found  bool         `json:"found"`
	Series []string     `json:"series"` // labels; [0] is the x series
	Data   [][]*float64 `json:"data"`   // [0] is x
	Legend int          `json:"legend"` // series rows in the legend
	Labels []string     `json:"labels"` // axis labels (drawn on the canvas)
	Canvas bool         `json:"canvas"`
	// Painted counts, per series after x, the canvas pixels of the series'
	// own colour: the lines, bars and markers were drawn.
	Painted []int `json:"painted"`
}

// chart reads the uPlot chart the page registered under name (window.ovs.charts).
func chart(t *testing.T, b *browser, name string) chartInfo {
	t.Helper()
	return eval[chartInfo](t, b, fmt.Sprintf(`(() => {
		const u = window.ovs && window.ovs.charts[%q];
		if (!u) return {found: false, series: [], data: [], legend: 0, labels: [], canvas: false, painted: []};
		const cv = u.root.querySelector("canvas");
		const px = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
		const rgb = (c) => { const m = c.match(/^#(..)(..)(..)$/); return m ? m.slice(1).map(h => parseInt(h, 16)) : null; };
		const painted = u.series.slice(1).map(s => {
			const c = rgb(typeof s.stroke === "function" ? s.stroke(u, 1) : s.stroke);
			if (!c) return 0;
			let n = 0;
			for (let i = 0; i < px.length; i += 4) {
				if (px[i + 3] > 200 && Math.abs(px[i] - c[0]) + Math.abs(px[i + 1] - c[1]) + Math.abs(px[i + 2] - c[2]) < 24) n++;
			}
			return n;
		});
		return {found: true, series: u.series.map(s => s.label), data: u.data.map(a => Array.from(a)),
			legend: u.root.querySelectorAll(".u-legend .u-series").length,
			labels: u.axes.map(a => a.label || ""),
			canvas: !!cv, painted};
	})()`, name))
}

// screenshot writes a full-page PNG of the page to name.png in
// -dashboard.screenshots, when given.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	if *screenshotDir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(*screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(*screenshotDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}
