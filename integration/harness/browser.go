//go:build integration

package harness

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
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

// Browser is one headless Chromium for a whole test: every page is loaded
// in its one tab. The machine's network is closed: every flag that makes
// Chromium reach out on its own is set.
type Browser struct {
	Ctx context.Context
}

// NewBrowser starts headless Chromium (Debian's chromium) with a profile of
// its own in a temporary folder; it is closed when the test ends.
func NewBrowser(t *testing.T) *Browser {
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
	return &Browser{Ctx: ctx}
}

// Open loads url and waits until the page drew what the API returned
// (body data-state ready), failing with the page's error message otherwise.
func (b *Browser) Open(t *testing.T, url string) {
	t.Helper()
	if state := b.Load(t, url); state != "ready" {
		msg := Eval[string](t, b, `document.getElementById("error").textContent`)
		t.Fatalf("%s: the page shows an error: %s", url, msg)
	}
}

// Load loads url and waits until the page is no longer loading; it
// returns the body's data-state: ready, or error (the page shows it).
func (b *Browser) Load(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return b.Settled(t, ctx, url)
}

// Settled waits until the page loaded after a navigation is no longer
// loading and returns its data-state.
func (b *Browser) Settled(t *testing.T, ctx context.Context, what string) string {
	t.Helper()
	state, err := chromedp.Run(ctx, chromedp.Poll[string](
		`document.body && document.body.dataset.state !== "loading" && document.body.dataset.state`,
		chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		t.Fatalf("%s: the page did not finish loading: %v", what, err)
	}
	return state
}

// Resize emulates a browser window of w x h CSS pixels for the pages
// opened next; 0, 0 returns to the window's own size.
func (b *Browser) Resize(t *testing.T, w, h int64) {
	t.Helper()
	a := chromedp.EmulateReset()
	if w > 0 {
		a = chromedp.EmulateViewport(w, h)
	}
	if err := chromedp.Do(b.Ctx, a); err != nil {
		t.Fatalf("resize to %dx%d: %v", w, h, err)
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its value.
func Eval[T any](t *testing.T, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Screenshot writes a full-page PNG of the page to name.png in
// -dashboard.screenshots, when given.
func (b *Browser) Screenshot(t *testing.T, name string) {
	t.Helper()
	if *screenshotDir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
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

// Printed waits until p printed a line matching re and returns its first group.
func Printed(t *testing.T, p *Proc, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	WaitFor(t, 30*time.Second, "ovstream to print "+re.String(), func() bool {
		m = re.FindStringSubmatch(p.Output())
		return m != nil
	})
	return m[1]
}

// SqlRow scans one row of query into dest.
func SqlRow(t *testing.T, db, query string, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, query).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
