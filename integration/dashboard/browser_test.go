//go:build integration

package dashboard

import (
	"fmt"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// cell is one table cell as the page shows it: its text and, for numbers
// and times, the exact value of the API in data-v ("" when none).
type cell struct {
	Text string `json:"text"`
	V    string `json:"v"`
}

// tableRows returns the body rows of the table with that id.
func tableRows(t *testing.T, b *harness.Browser, id string) [][]cell {
	t.Helper()
	return harness.Eval[[][]cell](t, b, fmt.Sprintf(`[...document.querySelectorAll("#%s tbody tr")].map(tr =>
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
func chart(t *testing.T, b *harness.Browser, name string) chartInfo {
	t.Helper()
	return harness.Eval[chartInfo](t, b, fmt.Sprintf(`(() => {
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
