// ovstream dashboard: draws and formats the numbers of the JSON API (api/...).
// It computes no statistic: every number comes exact from the server's rollups;
// cells show it rounded to 0.1 s and keep the exact value in data-v.
"use strict";

(function () {
  const pages = {
    delay: { title: "Network delay over time", render: renderDelay, form: delayForm },
    top: { title: "Most delayed lines and stations", render: renderTop, form: topForm },
    line: { title: "One line's delay by hour of day", render: renderLine, form: lineForm },
    ontime: { title: "On-time performance of stop visits", render: renderOnTime, form: onTimeForm },
    headway: { title: "Headways: gaps and excess wait", render: renderHeadway, form: headwayForm },
    accuracy: { title: "Prediction accuracy by horizon", render: renderAccuracy, form: accuracyForm },
    health: { title: "Pipeline health", render: renderHealth, form: healthForm },
  };
  const seg = location.pathname.split("/").pop();
  const page = pages[seg] ? seg : "delay";
  const params = new URLSearchParams(location.search);
  const colors = { ontime: "#2e7d5b", early: "#d68910", awt: "#1f5f99", excess: "#a04000", p90: "#c0392b", p50: "#1f5f99", mean: "#1e8449",
    p90open: "#e08e85", p50open: "#85a9cc", meanopen: "#85c29a", bar: "#e59866", dead: "#8e44ad", lag: "#2e86c1" };
  // window.ovs is read by the browser tests: the page, its charts (uPlot
  // instances by name) and the API answer it drew.
  const ovs = (window.ovs = { page, charts: {}, data: null });

  const $ = (id) => document.getElementById(id);

  // el builds an element: attrs are attributes (on* are listeners), children
  // strings or nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c != null) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const fmt1 = (v) => (v == null ? "–" : v.toFixed(1));

  // nameOf is the name the API gives an id (r: {id, name, short_name}), as
  // shown: a line's short name unless it is the id, then its name unless it
  // is the short name; "" when it has none (ids without a name get none).
  function nameOf(r) {
    const short = r.short_name && r.short_name !== r.id ? r.short_name : "";
    const name = r.name && r.name !== r.short_name && r.name !== r.id ? r.name : "";
    return [short, name].filter((x) => x).join(" ");
  }
  // labelOf labels an id: "id — name", or the id alone. The id stays: it is
  // the key.
  function labelOf(r) {
    const n = nameOf(r);
    return n ? `${r.id} — ${n}` : r.id;
  }
  // localTime shows an RFC 3339 time of the API (already in the page's time
  // zone) as "YYYY-MM-DD HH:MM:SS".
  const localTime = (s) => (s ? s.slice(0, 19).replace("T", " ") : "–");
  // inputTime is an RFC 3339 time of the API as the from and to inputs
  // show it: "YYYY-MM-DD HH:MM", 24-hour clock, like the charts.
  const inputTime = (s) => (s ? s.slice(0, 16).replace("T", " ") : "");

  // A numeric cell: rounded text, the exact value in data-v and the title.
  function num(v, digits = 1) {
    if (v == null) return el("td", { class: "n" }, "–");
    return el("td", { class: "n", "data-v": String(v), title: String(v) }, digits === 0 ? String(v) : v.toFixed(digits));
  }

  // A share cell: a percentage to 0.1, the exact share (0 to 1) in data-v.
  function pct(v) {
    if (v == null) return el("td", { class: "n" }, "–");
    return el("td", { class: "n", "data-v": String(v), title: String(v) }, (v * 100).toFixed(1));
  }

  function table(id, cols, rows) {
    return el(
      "table",
      { id },
      el("thead", {}, el("tr", {}, cols.map((c) => el("th", { class: c.num != null || c.pct ? "n" : null }, c.title)))),
      el(
        "tbody",
        {},
        rows.map((r, i) =>
          el(
            "tr",
            {},
            cols.map((c) => {
              const v = c.get(r, i);
              if (c.pct) return pct(v);
              if (c.num != null) return num(v, c.num);
              return el("td", { class: c.cls || null, "data-v": v == null ? null : String(v) }, v == null ? "–" : String(v));
            })
          )
        )
      )
    );
  }

  const statCols = [
    { title: "events", num: 0, get: (r) => r.events },
    { title: "mean (s)", num: 1, get: (r) => r.mean },
    { title: "P50 (s)", num: 1, get: (r) => r.p50 },
    { title: "P90 (s)", num: 1, get: (r) => r.p90 },
    { title: "max (s)", num: 1, get: (r) => r.max },
  ];

  async function getJSON(path, query) {
    const q = new URLSearchParams(query);
    for (const [k, v] of [...q]) if (v === "") q.delete(k);
    const r = await fetch(path + "?" + q.toString(), { headers: { Accept: "application/json" } });
    let body;
    try {
      body = await r.json();
    } catch (e) {
      throw new Error(`${path}: HTTP ${r.status}`);
    }
    if (!r.ok) throw new Error(body.error || `${path}: HTTP ${r.status}`);
    return body;
  }

  // The form of a page: its inputs are the page's URL parameters, so a URL
  // reproduces a view. Pipeline and time zone are on every page.
  function controls(meta, q, fields) {
    const f = $("controls");
    f.replaceChildren();
    const pipelines = meta.pipelines.includes(q.pipeline) ? meta.pipelines : [q.pipeline, ...meta.pipelines];
    f.append(
      el("label", {}, "pipeline", el("select", { name: "pipeline" }, pipelines.map((p) => el("option", { value: p, selected: p === q.pipeline }, p)))),
      ...fields,
      el("label", {}, "time zone", el("input", { name: "tz", value: q.tz, size: 18, list: "tz-list" })),
      el("datalist", { id: "tz-list" }, ["UTC", "Europe/Amsterdam", "Pacific/Auckland", "America/Halifax", "America/Edmonton"].map((z) => el("option", { value: z }))),
      el("button", { type: "submit" }, "Show")
    );
  }

  function input(label, name, value, attrs) {
    return el("label", {}, label, el("input", Object.assign({ name, value: value == null ? "" : value }, attrs || {})));
  }

  // timeInput is a from or to field: text in the page's time zone, 24-hour
  // clock as the charts ("YYYY-MM-DD HH:MM", or a date alone), not a
  // datetime-local input, whose clock follows the browser's locale (12-hour
  // in en-US). The server also reads RFC 3339.
  function timeInput(label, name, value) {
    return el("label", {}, `${label} (YYYY-MM-DD HH:MM, 24 h)`,
      el("input", { name, value: value == null ? "" : value, type: "text", size: 16, placeholder: "YYYY-MM-DD HH:MM",
        pattern: "\\d{4}-\\d{2}-\\d{2}([ T]\\d{2}:\\d{2}(:\\d{2})?)?", title: "a date and a 24-hour time, e.g. 2016-05-19 17:30" }));
  }

  // rangeInputs are the from and to fields of a page's range: as the API
  // gave them (d), or as the URL holds them after an error.
  function rangeInputs(q, d) {
    const from = d ? inputTime(q.from) : q.from, to = d ? inputTime(q.to) : q.to;
    return [timeInput("from", "from", from), timeInput("to", "to", to)];
  }

  // countInput is a field of a whole number from 1 (text after an error,
  // so that a wrong value shows as given).
  function countInput(label, name, value, d, attrs) {
    return input(label, name, value, Object.assign({ type: d ? "number" : "text", min: 1 }, attrs));
  }

  function select(label, name, value, options, attrs) {
    return el(
      "label",
      {},
      label,
      el("select", Object.assign({ name }, attrs || {}), options.map(([v, text]) => el("option", { value: v, selected: v === value }, text)))
    );
  }

  function chartBox(id) {
    return el("div", { class: "chart", id });
  }

  // width is the drawing width of a chart box (its padding is 8 px a side).
  function width(box) {
    return Math.max(300, (box.clientWidth || $("content").clientWidth || 1100) - 18);
  }

  // Time labels in the page's time zone, 24-hour clock: "HH:MM" ("HH:MM:SS"
  // when the ticks are less than a minute apart, as over one short bucket:
  // "HH:MM" would repeat), the date under the first label of each day, the
  // date alone for day steps.
  function timeFormats(tz) {
    const hm = new Intl.DateTimeFormat("en-GB", { timeZone: tz, hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    const hms = new Intl.DateTimeFormat("en-GB", { timeZone: tz, hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
    const ymd = new Intl.DateTimeFormat("en-CA", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit" });
    const date = (ts) => ymd.format(new Date(ts * 1e3));
    const time = (ts) => hm.format(new Date(ts * 1e3));
    return {
      full: (ts) => (ts == null ? "–" : `${date(ts)} ${time(ts)}`),
      axis: (u, splits, axisIdx, space, incr) =>
        splits.map((ts, i) => {
          if (incr >= 86400) return date(ts);
          const d = date(ts);
          const t = incr < 60 ? hms.format(new Date(ts * 1e3)) : time(ts);
          return i === 0 || d !== date(splits[i - 1]) ? `${t}\n${d}` : t;
        }),
    };
  }

  // axisFont is uPlot's default font of axis labels.
  const axisFont = "12px system-ui, -apple-system, \"Segoe UI\", Roboto, \"Helvetica Neue\", Arial, \"Noto Sans\", sans-serif, \"Apple Color Emoji\", \"Segoe UI Emoji\", \"Segoe UI Symbol\", \"Noto Color Emoji\"";

  // Tick steps of counts: whole numbers only.
  const wholeIncrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 1e8, 1e9];

  // timeChart draws the delay over time: P90, P50 and mean lines, the band
  // between P50 and P90 filled, over the range asked for. A bucket without
  // events breaks the lines. Buckets not yet final (provisional rows of open
  // windows, points with final false) are series of their own, lighter and
  // dashed, joined to the last final bucket before them; the legend names
  // them provisional and, at such a bucket, gives its events so far.
  function timeChart(name, box, points, q) {
    const tz = q.tz;
    const open = points.some((p) => p.final === false);
    const xs = [], events = [], provisional = [];
    const fin = [[], [], []], prov = [[], [], []];
    const vals = (p) => [p.p90, p.p50, p.mean];
    points.forEach((p, i) => {
      const gap = i > 0 && p.t - points[i - 1].t > 1.5 * q.bucket_s;
      if (gap) {
        xs.push((p.t + points[i - 1].t) / 2), events.push(null), provisional.push(false);
        fin.forEach((a) => a.push(null)), prov.forEach((a) => a.push(null));
      }
      const next = points[i + 1];
      const joins = p.final !== false && next && next.final === false && next.t - p.t <= 1.5 * q.bucket_s;
      xs.push(p.t), events.push(p.events), provisional.push(p.final === false);
      vals(p).forEach((v, k) => {
        fin[k].push(p.final === false ? null : v);
        prov[k].push(p.final === false || joins ? v : null);
      });
    });
    const value = (u, v) => fmt1(v);
    const tf = timeFormats(tz);
    const bucketValue = (u, ts, si, idx) =>
      idx != null && provisional[idx] ? `${tf.full(ts)}, provisional: ${events[idx]} events so far` : tf.full(ts);
    // The last tick label is centred on the plot's right edge: the right
    // padding holds half of the widest (a date, YYYY-MM-DD), so none is cut.
    const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = axisFont;
    const rightPad = Math.ceil(ctx.measureText("0000-00-00").width / 2) + 6;
    const dots = { show: points.length < 60, size: 7 };
    const series = [
      { label: "bucket start", value: open ? bucketValue : (u, ts) => tf.full(ts) },
      { label: "P90 (s)", stroke: colors.p90, width: 2, value, points: dots },
      { label: "P50 (s)", stroke: colors.p50, width: 2, value, points: dots },
      { label: "mean (s)", stroke: colors.mean, width: 1.5, dash: [6, 4], value, points: dots },
    ];
    const bands = [{ series: [1, 2], fill: "rgba(192, 57, 43, 0.13)" }];
    const data = [xs, ...fin];
    if (open) {
      const provDots = { show: true, size: 7, fill: "#ffffff" };
      series.push(
        { label: "P90 provisional (s)", stroke: colors.p90open, width: 2, dash: [3, 3], value, points: provDots },
        { label: "P50 provisional (s)", stroke: colors.p50open, width: 2, dash: [3, 3], value, points: provDots },
        { label: "mean provisional (s)", stroke: colors.meanopen, width: 1.5, dash: [2, 4], value, points: provDots }
      );
      bands.push({ series: [4, 5], fill: "rgba(192, 57, 43, 0.06)" });
      data.push(...prov);
    }
    const opts = {
      width: width(box),
      height: 380,
      padding: [null, rightPad, null, null],
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), tz),
      // The range asked for; a calendar bucket may start before it.
      scales: { x: { time: true, range: [Math.min(Date.parse(q.from) / 1e3, xs[0]), Date.parse(q.to) / 1e3] } },
      series,
      bands,
      axes: [
        { label: `bucket start (${tz})`, labelSize: 28, values: tf.axis, size: 56, space: 70, font: axisFont },
        { label: "delay (s)", labelSize: 28, size: 60 },
      ],
    };
    ovs.charts[name] = new uPlot(opts, data, box);
  }

  // placeLabels lays out the category labels of a horizontal bar chart as
  // HTML beside the plot (uPlot draws none there): each right-aligned in the
  // label area of width size, cut with an ellipsis when longer, its full
  // text in its title.
  function placeLabels(u, labels, size) {
    const wrap = u.root.querySelector(".u-wrap");
    let layer = wrap.querySelector(".cat-labels");
    if (!layer) {
      layer = el("div", { class: "cat-labels" });
      wrap.append(layer);
    }
    const left = parseFloat(u.over.style.left), top = parseFloat(u.over.style.top);
    layer.replaceChildren(
      ...labels.map((l, i) =>
        el("div", { class: "cat-label", title: l,
          style: `left:${left - size + 2}px;width:${size - 10}px;top:${top + u.valToPos(i, "x") - 9}px` }, l)
      )
    );
  }

  // barChart draws one bar per label (horizontal when labels are ids, with
  // the labels in HTML: placeLabels), with optional marker-only series on
  // the same categories.
  function barChart(name, box, labels, bars, markers, opts) {
    const n = labels.length;
    const horizontal = opts.horizontal;
    const xs = labels.map((_, i) => i);
    const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = "12px DejaVu Sans, Arial, sans-serif";
    // The label area fits the longest label, up to a third of the chart.
    const maxLabel = Math.max(120, Math.round(width(box) / 3));
    const labelWidth = Math.min(maxLabel, Math.ceil(Math.max(40, ...labels.map((l) => ctx.measureText(l).width)))) + 16;
    const value = (u, v) => (v == null ? "–" : opts.integer ? String(v) : fmt1(v));
    const series = [
      { label: opts.xLabel, value: (u, i) => (i == null ? "–" : labels[Math.round(i)] ?? "–") },
      {
        label: bars.label,
        fill: bars.color,
        stroke: bars.color,
        width: 0,
        value,
        paths: uPlot.paths.bars({ size: [0.7, 44], align: 0 }),
        points: { show: false },
      },
      ...markers.map((m) => ({
        label: m.label,
        stroke: m.color,
        fill: m.color,
        width: 0,
        value,
        paths: () => null,
        points: { show: true, size: 9, stroke: m.color, fill: m.color, width: 0 },
      })),
    ];
    const catAxis = {
      label: opts.xLabel,
      labelSize: 24,
      splits: () => xs,
      values: (u, splits) => splits.map((i) => (horizontal ? "" : labels[i] ?? "")),
      grid: { show: false },
      gap: 4,
    };
    const valAxis = { label: opts.yLabel, labelSize: 24, size: horizontal ? 36 : 64, space: horizontal ? 70 : 40 };
    if (opts.integer) valAxis.incrs = wholeIncrs;
    const all = [bars.values, ...markers.map((m) => m.values)].flat().filter((v) => v != null);
    const hi = Math.max(0, ...all), lo = Math.min(0, ...all);
    const pad = (hi - lo) * 0.06 || 1;
    const o = {
      width: width(box),
      height: horizontal ? Math.max(180, n * 26 + 90) : 340,
      legend: { show: true },
      cursor: { points: { show: false } },
      scales: {
        // Horizontal: the first label on top.
        x: { time: false, range: [-0.6, n - 0.4], ori: horizontal ? 1 : 0, dir: horizontal ? -1 : 1 },
        y: { range: opts.yRange || [lo < 0 ? lo - pad : 0, hi + pad], ori: horizontal ? 0 : 1, dir: 1 },
      },
      series,
      hooks: horizontal ? { draw: [(u) => placeLabels(u, labels, labelWidth)] } : {},
      axes: horizontal
        ? [Object.assign(catAxis, { side: 3, size: labelWidth }), Object.assign(valAxis, { side: 2 })]
        : [Object.assign(catAxis, { side: 2, size: 40 }), Object.assign(valAxis, { side: 3 })],
    };
    ovs.charts[name] = new uPlot(o, [xs, bars.values, ...markers.map((m) => m.values)], box);
  }

  function noData(msg) {
    return el("p", { class: "note nodata" }, msg);
  }

  // --- pages ---------------------------------------------------------------

  // The forms of the pages. d is the API's answer and q its query; when the
  // request failed (d null) q holds the URL's parameters as given, shown
  // as they are so that the wrong one can be corrected (main).

  // lineOptions are the options of a line select: the lines with events,
  // busiest first, and the chosen one when it has none.
  function lineOptions(q, d) {
    const options = d ? d.lines.map((l) => [l.id, `${labelOf(l)} (${l.events} events)`]) : [];
    if (q.line && !(d && d.lines.some((l) => l.id === q.line))) {
      options.unshift([q.line, d && d.line ? `${labelOf(d.line)} (no events)` : q.line]);
    }
    return options;
  }

  function delayForm(meta, q, d) {
    const open = delayParams().get("include_open"); // a bad value as given, to be corrected
    controls(meta, q, [
      ...rangeInputs(q, d),
      select("bucket", "bucket", params.get("bucket") || "auto",
        [["auto", d ? `auto (${q.bucket})` : "auto"], ...["5m", "15m", "30m", "hour", "3h", "6h", "day", "week", "month"].map((b) => [b, b])]),
      select("line", "line", q.line || "", [["", "all lines (network)"], ...lineOptions(q, d)], { class: "wide" }),
      select("windows", "include_open", open, [...(["1", "0"].includes(open) ? [] : [[open, open]]),
        ["1", "final and open (provisional)"], ["0", "final only"]]),
    ]);
  }

  // delayParams are the delay page's URL parameters with include_open
  // defaulting to 1: the page draws the windows not yet final too.
  function delayParams() {
    const p = new URLSearchParams(params);
    if (!p.get("include_open")) p.set("include_open", "1");
    return p;
  }

  async function renderDelay(meta, base) {
    const d = await getJSON("api/delay", delayParams());
    const q = d.query;
    delayForm(meta, q, d);
    const events = d.points.reduce((s, p) => s + p.events, 0);
    const open = d.points.filter((p) => p.final === false);
    const openNote = open.length === 0 ? "" : ` ${open.length} of them provisional (windows not yet final, lighter and ` +
      `dashed): ${open.reduce((s, p) => s + p.events, 0)} events so far, their numbers still change.`;
    const what = d.line ? `line ${labelOf(d.line)}` : "network (every event)";
    if (d.line) {
      $("title").textContent = `Line ${labelOf(d.line)}: delay over time`;
      document.title = `${$("title").textContent} · ovstream`;
    }
    $("subtitle").textContent = `Pipeline ${q.pipeline}, ${what}, ${localTime(q.from)} to ${localTime(q.to)} ${q.tz}, ` +
      `buckets of ${q.bucket}: ${d.points.length} buckets, ${events} events. The shaded band lies between P50 and P90.` + openNote;
    const c = $("content");
    if (d.points.length === 0) {
      c.append(noData(`No ${q.include_open ? "" : "finalized "}windows in this range. ${extentNote(d.extent)}`));
      return d;
    }
    const box = chartBox("delay-chart");
    c.append(box);
    timeChart("delay", box, d.points, q);
    c.append(
      el("h2", {}, `Per bucket (${q.tz})`),
      table("delay-table", [{ title: "bucket start", get: (r) => localTime(r.start) }, ...statCols,
        ...(open.length ? [{ title: "final", get: (r) => (r.final === false ? "no (provisional)" : "yes"), cls: "final" }] : [])], d.points)
    );
    return d;
  }

  function extentNote(e) {
    if (!e || !e.first_window) return "The pipeline has no finalized windows yet.";
    return `Its windows run from ${localTime(e.first_window)} to ${localTime(e.last_window_end)}.`;
  }

  function topForm(meta, q, d) {
    const day = new Date(q.day + "T12:00:00Z");
    const shift = (n) => {
      const x = new Date(day.getTime() + n * 86400e3).toISOString().slice(0, 10);
      const p = new URLSearchParams(params);
      p.set("day", x), p.set("pipeline", q.pipeline), p.set("tz", q.tz);
      return "?" + p.toString();
    };
    const e = d ? d.extent : {};
    controls(meta, q, [
      input("day", "day", q.day, d ? { type: "date", min: e.first_window ? e.first_window.slice(0, 10) : null,
        max: e.last_window_end ? e.last_window_end.slice(0, 10) : null } : { size: 10, placeholder: "YYYY-MM-DD" }),
      select("of", "dimension", q.dimension || "line", [["line", "lines"], ["station", "stations"], ["operator", "operators"]]),
      input("min. events", "min_events", q.min_events, { type: d ? "number" : "text", min: 1, style: "width:7em" }),
      input("top", "top", q.top, { type: d ? "number" : "text", min: 1, max: 500, style: "width:5em" }),
      isNaN(day) ? null : el("a", { href: shift(-1), id: "prev-day" }, "◀ day before"),
      isNaN(day) ? null : el("a", { href: shift(1), id: "next-day" }, "day after ▶"),
    ]);
  }

  async function renderTop(meta) {
    const d = await getJSON("api/top", params);
    const q = d.query;
    topForm(meta, q, d);
    const what = q.dimension === "station" ? "stations" : q.dimension + "s";
    $("subtitle").textContent = `Pipeline ${q.pipeline}, ${q.day} (${q.tz}): the ${q.top} ${what} with the highest P90 ` +
      `among those with at least ${q.min_events} events that day.`;
    const c = $("content");
    if (d.rows.length === 0) {
      c.append(noData(`No ${q.dimension} has ${q.min_events} events or more that day. ${extentNote(d.extent)}`));
      return d;
    }
    const box = chartBox("top-chart");
    c.append(box);
    barChart("top", box, d.rows.map(labelOf),
      { label: "P90 (s)", color: colors.bar, values: d.rows.map((r) => r.p90) },
      [{ label: "P50 (s)", color: colors.p50, values: d.rows.map((r) => r.p50) },
       { label: "mean (s)", color: colors.mean, values: d.rows.map((r) => r.mean) }],
      { horizontal: true, xLabel: q.dimension, yLabel: "delay (s)" });
    c.append(
      el("h2", {}, "Ranked by P90"),
      table("top-table", [
        { title: "#", get: (r, i) => i + 1 },
        { title: q.dimension, get: (r) => r.id, cls: "id" },
        // A column of names when the pipeline names any of them.
        ...(d.rows.some(nameOf) ? [{ title: "name", get: (r) => nameOf(r) || null, cls: "name" }] : []),
        ...statCols,
      ], d.rows)
    );
    return d;
  }

  function lineForm(meta, q, d) {
    controls(meta, q, [
      select("line", "line", q.line, lineOptions(q, d), { class: "wide", title: d && q.line ? labelOf(d.line) : null }),
      ...rangeInputs(q, d),
    ]);
  }

  async function renderLine(meta) {
    const d = await getJSON("api/line", params);
    const q = d.query;
    const line = q.line ? labelOf(d.line) : "–";
    if (q.line) {
      $("title").textContent = `Line ${line} by hour of day`;
      document.title = `${$("title").textContent} · ovstream`;
    }
    lineForm(meta, q, d);
    const events = d.hours.reduce((s, h) => s + h.events, 0);
    $("subtitle").textContent = `Pipeline ${q.pipeline}, line ${line}, ${localTime(q.from)} to ${localTime(q.to)} ${q.tz}: ` +
      `${events} events, grouped by the hour of day (${q.tz}) of their window.`;
    const c = $("content");
    if (d.hours.length === 0) {
      c.append(noData(`No events of this line in this range. ${extentNote(d.extent)}`));
      return d;
    }
    const byHour = new Map(d.hours.map((h) => [h.hour, h]));
    const hours = [...Array(24).keys()];
    const pick = (k) => hours.map((h) => (byHour.has(h) ? byHour.get(h)[k] : null));
    const box = chartBox("line-chart");
    c.append(box);
    barChart("line", box, hours.map((h) => String(h).padStart(2, "0")),
      { label: "P90 (s)", color: colors.bar, values: pick("p90") },
      [{ label: "P50 (s)", color: colors.p50, values: pick("p50") },
       { label: "mean (s)", color: colors.mean, values: pick("mean") }],
      { horizontal: false, xLabel: `hour of day (${q.tz})`, yLabel: "delay (s)" });
    c.append(
      el("h2", {}, "By hour of day"),
      table("line-table", [{ title: "hour", get: (r) => String(r.hour).padStart(2, "0") + ":00" }, ...statCols], d.hours)
    );
    return d;
  }

  function card(id, key, value, sub, cls, exact) {
    return el("div", { class: "card " + (cls || ""), id },
      el("div", { class: "k" }, key),
      el("div", { class: "v", "data-v": exact == null ? null : String(exact) }, value),
      sub ? el("div", { class: "s" }, sub) : null);
  }

  function healthForm(meta, q) {
    controls(meta, q, [el("a", { href: location.search || "?" }, "refresh")]);
  }

  async function renderHealth(meta) {
    const d = await getJSON("api/health", params);
    const q = d.query;
    healthForm(meta, q);
    const c = $("content");
    const dead = d.dead_letters.reduce((s, r) => s + r.total, 0);
    const lag = d.lag;
    const lagSub = lag.known ? (lag.source === "run" ? "this instance's partitions, at its last poll" : "from Kafka's high water marks")
      : (lag.note || "").replace(/^unknown: /, "");
    $("subtitle").textContent = d.claimed
      ? `Pipeline ${q.pipeline}: what the database holds of its progress${d.run ? ", and this instance's own view" : ""}. Times in ${q.tz}.`
      : `Pipeline ${q.pipeline} was never claimed: no run has started.`;
    c.append(
      el("div", { class: "cards" },
        card("h-lag", "lag (messages)", lag.total == null ? "unknown" : String(lag.total), lagSub,
          lag.total == null ? "" : lag.total === 0 ? "good" : "", lag.total),
        card("h-watermark", "watermark (stored)", localTime(d.watermark), "the lowest of its partitions", "", d.watermark),
        card("h-newest", "newest window end", localTime(d.newest_window_end), "of delay_aggregates", "", d.newest_window_end),
        card("h-commit", "last commit", localTime(d.last_commit), "newest stored position", "", d.last_commit),
        card("h-fresh", "closable window age", `${d.freshness.closable_age_s.toFixed(1)} s`,
          d.freshness.closable_since ? `a window closable since ${localTime(d.freshness.closable_since)} is not written yet (${d.freshness.owner})`
            : "every closable window is written",
          d.freshness.closable_since ? (d.freshness.closable_age_s > 60 ? "bad" : "") : "good", d.freshness.closable_age_s),
        card("h-merge", "merge lag (windows)", String(d.merge.pending_windows),
          d.merge.pending_windows > 0 ? `oldest ${localTime(d.merge.oldest_pending)}, held by ${d.merge.holding.join(", ") || "–"}`
            : d.merge.merged_until ? `merged until ${localTime(d.merge.merged_until)}` : "not split",
          d.merge.pending_windows > 0 ? "bad" : "good", d.merge.pending_windows),
        card("h-dead", "dead letters", String(dead), d.dead_letters.map((r) => `${r.reason} ${r.total}`).join(", ") || "none",
          dead > 0 ? "bad" : "good", dead),
        d.replica ? card("h-replica", "replica lag", d.replica.replay_age_s == null ? "unknown" : `${d.replica.replay_age_s.toFixed(1)} s`,
          `read from the hot standby ${d.replica.server}: as of ${localTime(d.replica.last_replay_at)}`, "", d.replica.replay_age_s) : null
      )
    );
    if (d.run) {
      const r = d.run;
      c.append(
        el("h2", { id: "run-title" }, `This instance: ${r.owner}`),
        el("div", { class: "cards", id: "run" },
          card("r-state", "state", r.standby ? "standby" : r.assigned ? "running" : "starting", r.standby || "", r.standby ? "bad" : "good"),
          card("r-commit", "its last commit", localTime(r.last_commit), "", "", r.last_commit),
          card("r-watermark", "its watermark", localTime(r.watermark), "in memory", "", r.watermark),
          card("r-open", "open windows", String(r.open_windows), "held in memory", "", r.open_windows),
          card("r-uncommitted", "uncommitted messages", String(r.uncommitted_messages), "consumed since the last commit", "", r.uncommitted_messages)
        )
      );
    }
    const two = el("div", { class: "two" });
    c.append(two);
    const left = el("div", {}, el("h2", {}, "Dead letters by reason"));
    const right = el("div", {}, el("h2", {}, "Lag by partition"));
    two.append(left, right);
    if (d.dead_letters.length > 0) {
      const box = chartBox("dead-chart");
      left.append(box);
      barChart("dead", box, d.dead_letters.map((r) => r.reason),
        { label: "dead letters", color: colors.dead, values: d.dead_letters.map((r) => r.total) }, [],
        { horizontal: true, xLabel: "reason", yLabel: "records", integer: true });
      left.append(table("dead-table", [
        { title: "reason", get: (r) => r.reason },
        { title: "records", num: 0, get: (r) => r.total },
        { title: "replayed", num: 0, get: (r) => r.replayed },
      ], d.dead_letters));
    } else {
      left.append(noData("No dead letters."));
    }
    const known = lag.partitions.filter((p) => p.lag != null);
    if (known.length > 0 && known.every((p) => p.lag === 0)) {
      right.append(noData(`Every partition is caught up (lag 0).`));
    } else if (known.length > 0) {
      const box = chartBox("lag-chart");
      right.append(box);
      barChart("lag", box, known.map((p) => p.partition),
        { label: "lag (messages)", color: colors.lag, values: known.map((p) => p.lag) }, [],
        { horizontal: true, xLabel: "partition", yLabel: "messages", integer: true });
    }
    if (lag.partitions.length > 0) {
      // The run's own gauges hold the lag alone; Kafka gives its parts too.
      const cols = lag.source === "run" ? [] : [
        { title: "next offset", num: 0, get: (p) => p.next_offset },
        { title: "high water", num: 0, get: (p) => p.high_water },
      ];
      right.append(table("lag-table", [
        { title: "partition", get: (p) => p.partition },
        ...cols,
        { title: "lag", num: 0, get: (p) => p.lag },
      ], lag.partitions));
    } else {
      right.append(noData(lag.note || "No partitions."));
    }
    c.append(el("h2", {}, "Instances"));
    if (d.instances.length > 0) {
      c.append(table("instances-table", [
        { title: "owner", get: (i) => i.owner },
        { title: "role", get: (i) => i.role },
        { title: "partitions", num: 0, get: (i) => i.partitions },
        { title: "heartbeat age (s)", num: 1, get: (i) => i.heartbeat_age_s },
        { title: "closable window age (s)", num: 1, get: (i) => i.closable_age_s },
        { title: "alive", get: (i) => (i.alive ? "yes" : "no (dead or frozen)") },
      ], d.instances));
    } else {
      c.append(noData("No instance is running."));
    }
    return d;
  }

  // --- stop visits: on time and headways ----------------------------------

  // definitions are the on-time definitions the form offers (the API also
  // takes EARLY,LATE in seconds).
  const definitions = [["na", "North American: 1 min early to 5 min late"], ["crow", "CROW (NL): 30 s early to 3 min late"]];

  function visitsNote(d) {
    const s = d && d.service_days;
    if (!s || !s.first) return "The pipeline has no stop visits yet.";
    return `Its stop visits are of the service days ${s.first} to ${s.last}.`;
  }

  // arriving says which stop visits a page counts.
  const arriving = (q) => `Pipeline ${q.pipeline}, stop visits arriving ${localTime(q.from)} to ${localTime(q.to)} ${q.tz}`;

  const share100 = (v) => (v == null ? null : v * 100);
  const pctText = (v) => (v == null ? "–" : `${(v * 100).toFixed(1)} %`);

  const onTimeCols = [
    { title: "visits", num: 0, get: (r) => r.visits },
    { title: "early", num: 0, get: (r) => r.early },
    { title: "on time", num: 0, get: (r) => r.on_time },
    { title: "late", num: 0, get: (r) => r.late },
    { title: "on time (%)", pct: true, get: (r) => r.on_time_share },
  ];

  function onTimeForm(meta, q, d) {
    const def = q.definition || "na";
    const opts = definitions.some(([v]) => v === def) ? definitions : [[def, `${def} (s early, s late)`], ...definitions];
    controls(meta, q, [
      ...rangeInputs(q, d),
      select("on time", "definition", def, opts),
      countInput("min. visits", "min_visits", q.min_visits, d, { style: "width:7em" }),
      countInput("lines", "top", q.top, d, { max: 500, style: "width:5em" }),
    ]);
  }

  async function renderOnTime(meta) {
    const d = await getJSON("api/ontime", params);
    const q = d.query;
    onTimeForm(meta, q, d);
    const band = `${q.early_s} s early to ${q.late_s} s late`;
    $("subtitle").textContent = `${arriving(q)}: a visit is on time from ${band}, bounds included (the delay of its last prediction).`;
    const c = $("content");
    const t = d.total;
    c.append(el("div", { class: "cards" },
      card("ot-visits", "stop visits", String(t.visits), "arriving in the range", "", t.visits),
      card("ot-share", "on time", pctText(t.on_time_share), `${t.on_time} visits, ${band}`, "", t.on_time_share),
      card("ot-early", "early", String(t.early), `more than ${q.early_s} s early`, "", t.early),
      card("ot-late", "late", String(t.late), `more than ${q.late_s} s late`, "", t.late)));
    if (t.visits === 0) {
      c.append(noData(`No stop visits arrive in this range. ${visitsNote(d)}`));
      return d;
    }
    const pctAxis = { yLabel: "on time (%)", yRange: [0, 100] };
    c.append(el("h2", {}, `Lines, least on time first (at least ${q.min_visits} visits)`));
    if (d.lines.length > 0) {
      const box = chartBox("ontime-lines-chart");
      c.append(box);
      barChart("ontime-lines", box, d.lines.map(labelOf),
        { label: "on time (%)", color: colors.ontime, values: d.lines.map((r) => share100(r.on_time_share)) }, [],
        Object.assign({ horizontal: true, xLabel: "line" }, pctAxis));
      c.append(table("ontime-lines-table", [
        { title: "#", get: (r, i) => i + 1 },
        { title: "line", get: (r) => r.id },
        ...(d.lines.some(nameOf) ? [{ title: "name", get: (r) => nameOf(r) || null, cls: "name" }] : []),
        ...onTimeCols,
      ], d.lines));
    } else {
      c.append(noData(`No line has ${q.min_visits} visits or more in this range.`));
    }
    const byHour = new Map(d.hours.map((h) => [h.hour, h]));
    const hours = [...Array(24).keys()];
    c.append(el("h2", {}, `By hour of day of arrival (${q.tz})`));
    const hbox = chartBox("ontime-hours-chart");
    c.append(hbox);
    barChart("ontime-hours", hbox, hours.map((h) => String(h).padStart(2, "0")),
      { label: "on time (%)", color: colors.ontime, values: hours.map((h) => (byHour.has(h) ? share100(byHour.get(h).on_time_share) : null)) }, [],
      Object.assign({ horizontal: false, xLabel: `hour of day (${q.tz})` }, pctAxis));
    c.append(table("ontime-hours-table", [{ title: "hour", get: (r) => String(r.hour).padStart(2, "0") + ":00" }, ...onTimeCols], d.hours));
    c.append(el("h2", {}, "By service day"));
    const dbox = chartBox("ontime-days-chart");
    c.append(dbox);
    barChart("ontime-days", dbox, d.days.map((r) => r.day),
      { label: "on time (%)", color: colors.ontime, values: d.days.map((r) => share100(r.on_time_share)) }, [],
      Object.assign({ horizontal: false, xLabel: "service day" }, pctAxis));
    c.append(table("ontime-days-table", [{ title: "service day", get: (r) => r.day }, ...onTimeCols], d.days));
    return d;
  }

  function headwayForm(meta, q, d) {
    controls(meta, q, [
      ...rangeInputs(q, d),
      select("per", "dimension", q.dimension || "line", [["line", "line (over its stops)"], ["station", "station (over its lines)"]]),
      input("wait tolerance", "wait_tolerance", q.wait_tolerance, { type: d ? "number" : "text", min: 0, max: 10, step: 0.05, style: "width:6em",
        title: "an observed gap up to the scheduled gap × (1 + tolerance) passes the wait assessment" }),
      countInput("min. gaps", "min_gaps", q.min_gaps, d, { style: "width:6em" }),
      countInput("rows", "top", q.top, d, { max: 500, style: "width:5em" }),
    ]);
  }

  async function renderHeadway(meta) {
    const d = await getJSON("api/headway", params);
    const q = d.query;
    headwayForm(meta, q, d);
    $("subtitle").textContent = `${arriving(q)}: ` +
      `the gaps between consecutive visits of a line at a stop on a service day, observed (predicted arrivals) and scheduled ` +
      `(arrival minus delay). Excess wait = average wait minus scheduled wait; wait assessment = the gaps at most ` +
      `${(100 * (1 + q.wait_tolerance)).toFixed(0)} % of the scheduled gap.`;
    const c = $("content");
    const t = d.total;
    const sec = (v) => (v == null ? "–" : `${v.toFixed(1)} s`);
    c.append(el("div", { class: "cards" },
      card("hw-gaps", "gaps", String(t.gaps), "observed, in the range", "", t.gaps),
      card("hw-mean", "mean headway", sec(t.mean_headway_s), `scheduled ${sec(t.scheduled_mean_headway_s)}`, "", t.mean_headway_s),
      card("hw-awt", "average wait", sec(t.awt_s), `scheduled ${sec(t.swt_s)}`, "", t.awt_s),
      card("hw-excess", "excess wait", sec(t.excess_wait_s), "average minus scheduled wait", "", t.excess_wait_s),
      card("hw-assessment", "wait assessment", pctText(t.wait_assessment), `${t.within_tolerance} of ${t.assessed} gaps`, "", t.wait_assessment)));
    if (t.gaps === 0) {
      c.append(noData(`No two visits of a line at a stop arrive in this range. ${visitsNote(d)}`));
      return d;
    }
    const what = q.dimension === "station" ? "Stations" : "Lines";
    c.append(el("h2", {}, `${what}, greatest excess wait first (at least ${q.min_gaps} gaps)`));
    if (d.rows.length === 0) {
      c.append(noData(`No ${q.dimension} has ${q.min_gaps} gaps or more in this range.`));
      return d;
    }
    const box = chartBox("headway-chart");
    c.append(box);
    barChart("headway", box, d.rows.map(labelOf),
      { label: "excess wait (s)", color: colors.excess, values: d.rows.map((r) => r.excess_wait_s) },
      [{ label: "average wait (s)", color: colors.awt, values: d.rows.map((r) => r.awt_s) },
       { label: "scheduled wait (s)", color: colors.ontime, values: d.rows.map((r) => r.swt_s) }],
      { horizontal: true, xLabel: q.dimension, yLabel: "wait (s)" });
    c.append(table("headway-table", [
      { title: "#", get: (r, i) => i + 1 },
      { title: q.dimension, get: (r) => r.id },
      ...(d.rows.some(nameOf) ? [{ title: "name", get: (r) => nameOf(r) || null, cls: "name" }] : []),
      { title: "gaps", num: 0, get: (r) => r.gaps },
      { title: "mean gap (s)", num: 1, get: (r) => r.mean_headway_s },
      { title: "avg. wait (s)", num: 1, get: (r) => r.awt_s },
      { title: "sched. gaps", num: 0, get: (r) => r.scheduled_gaps },
      { title: "sched. wait (s)", num: 1, get: (r) => r.swt_s },
      { title: "excess wait (s)", num: 1, get: (r) => r.excess_wait_s },
      { title: "assessed", num: 0, get: (r) => r.assessed },
      { title: "within", num: 0, get: (r) => r.within_tolerance },
      { title: "wait assess. (%)", pct: true, get: (r) => r.wait_assessment },
    ], d.rows));
    return d;
  }

  // --- prediction accuracy ---------------------------------------------------

  // minSec writes seconds as minutes where whole ("3 min"), else seconds.
  const minSec = (s) => (s % 60 === 0 ? `${s / 60} min` : `${s} s`);
  const bucketName = (b) => `${minSec(b.horizon_from_s)}–${minSec(b.horizon_to_s)}`;
  const bandName = (b) => `${b.early_s} s to +${b.late_s} s`;

  function accuracyForm(meta, q, d) {
    controls(meta, q, [
      ...rangeInputs(q, d),
      input("bands (FROM-TO:EARLY..LATE, …; empty: the benchmark's)", "bands", q.bands, { size: 30, placeholder: "0-3m:-30s..90s,3m-6m:-1m..2m30s" }),
      countInput("min. predictions", "min_predictions", q.min_predictions, d, { style: "width:7em" }),
      countInput("lines", "top", q.top, d, { max: 500, style: "width:5em" }),
    ]);
  }

  async function renderAccuracy(meta) {
    const d = await getJSON("api/accuracy", params);
    const q = d.query;
    accuracyForm(meta, q, d);
    $("subtitle").textContent = `Pipeline ${q.pipeline}, predictions of the stop visits arriving ${localTime(q.from)} to ` +
      `${localTime(q.to)} ${q.tz} that arrived (their last prediction made at most 2 min before the arrival it gives), ` +
      `scored against that last prediction: horizon = arrival − time of the prediction, ` +
      `error = realized − predicted arrival (positive: the vehicle came later than predicted); accurate within the band of ` +
      `its horizon bucket (${q.bands ? "bands as given" : "the ETA Accuracy Benchmark's"}).`;
    const c = $("content");
    const predictions = d.buckets.reduce((s, b) => s + b.predictions, 0);
    c.append(el("div", { class: "cards" },
      card("acc-overall", "accuracy", pctText(d.overall), "mean of the buckets' shares", "", d.overall),
      card("acc-predictions", "predictions scored", String(predictions), "in the horizon buckets", "", predictions)));
    if (d.buckets.length === 0) {
      c.append(noData(`No prediction before a visit arriving in this range falls in a horizon bucket. ${visitsNote(d)}`));
      return d;
    }
    c.append(el("h2", {}, "By horizon bucket (the network)"));
    const box = chartBox("accuracy-chart");
    c.append(box);
    barChart("accuracy", box, d.buckets.map(bucketName),
      { label: "accurate (%)", color: colors.ontime, values: d.buckets.map((b) => share100(b.accuracy)) }, [],
      { horizontal: false, xLabel: "horizon: time before the arrival", yLabel: "accurate (%)", yRange: [0, 100] });
    c.append(table("accuracy-table", [
      { title: "horizon", get: (b) => bucketName(b) },
      { title: "accurate when the error is", get: (b) => bandName(b) },
      { title: "predictions", num: 0, get: (b) => b.predictions },
      { title: "accurate", num: 0, get: (b) => b.accurate },
      { title: "accurate (%)", pct: true, get: (b) => b.accuracy },
      { title: "mean error (s)", num: 1, get: (b) => b.mean_error_s },
      { title: "P50 error (s)", num: 1, get: (b) => b.p50_error_s },
      { title: "P90 error (s)", num: 1, get: (b) => b.p90_error_s },
    ], d.buckets));
    c.append(el("h2", {}, `Lines, least accurate first (at least ${q.min_predictions} predictions)`));
    if (d.lines.length === 0) {
      c.append(noData(`No line has ${q.min_predictions} predictions or more in the buckets.`));
      return d;
    }
    const lbox = chartBox("accuracy-lines-chart");
    c.append(lbox);
    barChart("accuracy-lines", lbox, d.lines.map(labelOf),
      { label: "accuracy (%)", color: colors.ontime, values: d.lines.map((r) => share100(r.accuracy)) }, [],
      { horizontal: true, xLabel: "line", yLabel: "accuracy (%): mean of the buckets' shares", yRange: [0, 100] });
    c.append(table("accuracy-lines-table", [
      { title: "#", get: (r, i) => i + 1 },
      { title: "line", get: (r) => r.id },
      ...(d.lines.some(nameOf) ? [{ title: "name", get: (r) => nameOf(r) || null, cls: "name" }] : []),
      { title: "predictions", num: 0, get: (r) => r.predictions },
      { title: "buckets", num: 0, get: (r) => r.buckets },
      { title: "accuracy (%)", pct: true, get: (r) => r.accuracy },
    ], d.lines));
    return d;
  }

  // --- start ---------------------------------------------------------------

  async function main() {
    document.title = `${pages[page].title} · ovstream`;
    if (["ontime", "headway", "accuracy"].includes(page)) {
      $("footer").textContent = "Every number comes from the stop visits (table stop_visits) through the SQL functions of " +
        "ovstream report: counts are exact and shares their quotients; seconds rounded to 0.1 s, shares to 0.1 % here " +
        "(hover a cell for the exact value).";
    }
    $("title").textContent = pages[page].title;
    let meta = null;
    try {
      meta = await getJSON("api/pipelines", {});
      const pipeline = params.get("pipeline") || meta.default;
      const tz = params.get("tz") || meta.tz;
      if (!params.get("pipeline") && pipeline) params.set("pipeline", pipeline);
      if (!params.get("tz")) params.set("tz", tz);
      for (const a of document.querySelectorAll("nav a")) {
        a.classList.toggle("active", a.dataset.page === page);
        a.href = a.dataset.page + "?" + new URLSearchParams({ pipeline, tz }).toString();
      }
      $("pipeline-name").textContent = pipeline ? `pipeline ${pipeline}` : "no pipeline yet";
      ovs.data = await pages[page].render(meta);
      document.body.dataset.state = "ready";
    } catch (e) {
      $("error").hidden = false;
      $("error").textContent = e.message;
      // The form stays, with the parameters as given (the wrong one
      // among them), so that they can be corrected.
      if (meta && !$("controls").hasChildNodes()) {
        const q = Object.fromEntries(params);
        q.pipeline = q.pipeline || meta.default || "";
        pages[page].form(meta, q, null);
      }
      document.body.dataset.state = "error";
    }
  }

  main();
})();
