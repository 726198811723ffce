package replay

import (
	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/outcome"

	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chart colours, shared with the test that looks for them in a screenshot.
const (
	levelColour     = "#d62728"
	thresholdColour = "#1f77b4"
	shadeColour     = "#ff9896"
	shadeOpacity    = "0.5"
)

// Limits keep the page readable (and small) however large the report.
const (
	// MaxChartsPerSet is how many of a rule set's keys (the most affected first) get a
	// chart; the rest of the -top keys are in its table only.
	MaxChartsPerSet = 10
	maxDiffRows     = 50
)

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartW    = 1100
	chartH    = 250
	chartPadL = 70
	chartPadR = 14
	chartPadT = 30 // room for the legend
	chartPadB = 28 // room for the time labels
)

// WriteHTML writes r as one self-contained HTML page: its styles and charts are inline
// (the charts are SVG drawn here, no script), so the page fetches nothing and can be
// mailed or archived as it is. The same Report always gives the same bytes. Nothing is
// written to w if the page cannot be made.
func WriteHTML(w io.Writer, r *Report) error {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, newHTMLPage(r)); err != nil {
		return fmt.Errorf("replay: rendering the html report: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("replay: writing the html report: %w", err)
	}
	return nil
}

type htmlPage struct {
	*Report
	FromTo   string
	Cands    []htmlCandidate
	ShowDiff bool
	DiffRows []TeamDiff
	DiffMore int
	NameA    string
	NameB    string
}

type htmlCandidate struct {
	*CandidateReport
	Dead      []deadRow
	Charts    []htmlChart
	ChartMore int // keys past the chart budget
}

type deadRow struct {
	Reason string
	N      int64
}

type htmlChart struct {
	Key *KeyReport
	SVG *svgChart // nil: no minutes to draw
}

func newHTMLPage(r *Report) *htmlPage {
	p := &htmlPage{Report: r, FromTo: "—"}
	if !r.From.IsZero() || !r.To.IsZero() {
		p.FromTo = fmtTime(r.From, time.DateTime) + " – " + fmtTime(r.To, time.DateTime) + " UTC"
	}
	for i := range r.Candidates {
		c := &r.Candidates[i]
		hc := htmlCandidate{CandidateReport: c}
		// A map: sorted so that the page is the same bytes every time.
		for _, reason := range slices.Sorted(maps.Keys(c.DeadLetters)) {
			hc.Dead = append(hc.Dead, deadRow{reason, c.DeadLetters[reason]})
		}
		n := min(len(c.Keys), MaxChartsPerSet)
		hc.ChartMore = len(c.Keys) - n
		for j := range c.Keys[:n] {
			k := &c.Keys[j]
			hc.Charts = append(hc.Charts, htmlChart{Key: k, SVG: newSVGChart(k)})
		}
		p.Cands = append(p.Cands, hc)
	}
	if len(r.Candidates) == 2 && len(r.Diff) > 0 {
		p.ShowDiff = true
		p.NameA, p.NameB = r.Candidates[0].Name, r.Candidates[1].Name
		n := min(len(r.Diff), maxDiffRows)
		p.DiffRows, p.DiffMore = r.Diff[:n], len(r.Diff)-n
	}
	return p
}

// svgChart is one key's chart, its coordinates already formatted.
type svgChart struct {
	Title      string
	W, H       int
	X0, X1     string // the plot's left and right edges
	Y0, Y1     string // its top and bottom
	PlotW      string
	PlotH      string
	LabelX     string // the right edge of the level labels
	TimeY      string // the baseline of the time labels
	YMid       string
	Shades     []svgRect
	Levels     []string // polyline points, one per run of consecutive minutes
	Dots       []svgPoint
	Thresholds []string
	YMaxLabel  string
	YMidLabel  string
	Start, End string
	LegendY    string
	NoLevel    bool // no minute has a level (a key affected where none was seen)
}

type svgRect struct{ X, Y, W, H string }

type svgPoint struct{ X, Y string }

// newSVGChart lays out k's series, or returns nil when it has none. Each point is one
// minute, [Minute, Minute+1m): the threshold and the shading cover the whole minute, the
// level is drawn at its middle. Lines are broken where minutes are missing rather than
// drawn across what was not seen.
//
// A key whose every minute has no threshold (no level seen of it, Point) has no level to
// draw either: its chart shades the minutes it was over and is marked
// NoLevel, drawn without the axis's figures and the level's and threshold's legend (it
// had a 0 to 1 axis under a legend promising both).
func newSVGChart(k *KeyReport) *svgChart {
	if len(k.Series) == 0 {
		return nil
	}
	pts := slices.Clone(k.Series)
	slices.SortStableFunc(pts, func(a, b Point) int { return a.Minute.Compare(b.Minute) })
	t0 := pts[0].Minute
	t1 := pts[len(pts)-1].Minute.Add(time.Minute) // so one minute, or equal times, still spans the plot
	span := float64(t1.Sub(t0))

	var ymax float64
	for _, p := range pts {
		ymax = max(ymax, p.Level)
		if p.Threshold > 0 {
			ymax = max(ymax, float64(p.Threshold))
		}
	}
	ymax = niceCeil(ymax * 1.05)

	plotW := float64(chartW - chartPadL - chartPadR)
	plotH := float64(chartH - chartPadT - chartPadB)
	x := func(t time.Time) float64 { return chartPadL + float64(t.Sub(t0))/span*plotW }
	y := func(v float64) float64 { return chartPadT + plotH - min(max(v, 0), ymax)/ymax*plotH }
	next := func(i int) bool { return i+1 < len(pts) && pts[i+1].Minute.Sub(pts[i].Minute) == time.Minute }

	c := &svgChart{
		Title: ruleName(k.Rule) + " · " + cli.Shown(k.Key) + ": level and threshold per minute",
		W:     chartW, H: chartH,
		X0: f1(chartPadL), X1: f1(chartPadL + plotW), Y0: f1(chartPadT), Y1: f1(chartPadT + plotH),
		YMid: f1(y(ymax / 2)), YMaxLabel: fmtNum(ymax), YMidLabel: fmtNum(ymax / 2),
		Start: fmtTime(t0, "2006-01-02 15:04"), End: fmtTime(t1, "2006-01-02 15:04") + " UTC",
		PlotW: f1(plotW), PlotH: f1(plotH), LabelX: f1(chartPadL - 6), TimeY: f1(chartPadT + plotH + 18),
		LegendY: f1(chartPadT / 2),
		NoLevel: !slices.ContainsFunc(pts, func(p Point) bool { return p.Threshold > 0 }),
	}
	// Consecutive affected minutes make one rectangle: abutting translucent ones would
	// show seams where their antialiased edges overlap.
	for i := 0; i < len(pts); i++ {
		if pts[i].Affected <= 0 {
			continue
		}
		j := i
		for next(j) && pts[j+1].Affected > 0 {
			j++
		}
		x0, x1 := x(pts[i].Minute), x(pts[j].Minute.Add(time.Minute))
		c.Shades = append(c.Shades, svgRect{f1(x0), f1(chartPadT), f1(max(x1-x0, 1)), f1(plotH)})
		i = j
	}
	// A minute with no threshold has no level either: the key was affected then without
	// a level of it seen. Its level is not 0, it is unknown: not drawn.
	for i := 0; i < len(pts); i++ {
		if pts[i].Threshold <= 0 {
			continue
		}
		j := i
		for next(j) && pts[j+1].Threshold > 0 {
			j++
		}
		if i == j {
			p := pts[i]
			c.Dots = append(c.Dots, svgPoint{f1(x(p.Minute.Add(30 * time.Second))), f1(y(p.Level))})
		} else {
			var b strings.Builder
			for _, p := range pts[i : j+1] {
				fmt.Fprintf(&b, "%s,%s ", f1(x(p.Minute.Add(30*time.Second))), f1(y(p.Level)))
			}
			c.Levels = append(c.Levels, strings.TrimSpace(b.String()))
		}
		i = j
	}
	// The threshold is a step per minute; a minute without one (0) breaks it.
	for i := 0; i < len(pts); i++ {
		if pts[i].Threshold <= 0 {
			continue
		}
		var b strings.Builder
		j := i
		for {
			p := pts[j]
			ty := f1(y(float64(p.Threshold)))
			fmt.Fprintf(&b, "%s,%s %s,%s ", f1(x(p.Minute)), ty, f1(x(p.Minute.Add(time.Minute))), ty)
			if !next(j) || pts[j+1].Threshold <= 0 {
				break
			}
			j++
		}
		c.Thresholds = append(c.Thresholds, strings.TrimSpace(b.String()))
		i = j
	}
	return c
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten, so that the axis label
// is a round number.
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// ratioDown is a key's peak ratio to prec decimals, rounded down: a key that stayed under
// its threshold (a forced one, limited at 0.96 of it) is never shown at it ("1.0×").
// The tolerance keeps a ratio such as 2.3, whose product by 10 is 22.999…, at 2.3.
func ratioDown(v float64, prec int) string {
	p := math.Pow10(prec)
	return strconv.FormatFloat(math.Floor(v*p+1e-9)/p, 'f', prec, 64)
}

func fmtTime(t time.Time, layout string) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(layout)
}

// fmtNum is v for an axis label: whole numbers grouped, fractions to two places.
func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return outcome.Thousands(int64(v))
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func ruleName(r string) string {
	if r == "" {
		return "(GATE_* limits)"
	}
	return r
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"named":  namedRules,
	"legend": func() string { return strings.ToUpper(ruleLegend[:1]) + ruleLegend[1:] },
	"num": func(v any) string {
		switch n := v.(type) {
		case int:
			return outcome.Thousands(int64(n))
		case int64:
			return outcome.Thousands(n)
		}
		return fmt.Sprint(v)
	},
	"rule": ruleName,
	// A key or team is whatever bytes an event carried: one that is not plain printable
	// text is shown quoted, as the text report shows it, not as the browser would (invalid
	// UTF-8 and a NUL as �, control characters as nothing: distinct keys alike).
	"key": cli.Shown,
	"minute": func(t time.Time) string {
		return fmtTime(t, "2006-01-02 15:04")
	},
	"ratio": func(v float64) string {
		if v <= 0 {
			return "—" // no level seen: no ratio
		}
		return ratioDown(v, 2) + "×" // as the text report has it
	},
	"signed": signed,
	"reason": func(s string) string { return cmp.Or(s, "(no reason)") },
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Replay of {{.Topic}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  max-width: 1140px; margin: 1.5em auto; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: .3em; }
h2 { font-size: 1.3em; border-bottom: 2px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1.1em; margin: 1.4em 0 .4em; }
h4 { font-size: 1em; margin: 1em 0 .2em; font-weight: 600; }
table { border-collapse: collapse; margin: .4em 0 1em; font-size: .95em; }
th, td { border: 1px solid #bbb; padding: .25em .6em; text-align: right; vertical-align: top; }
th { background: #f2f2f2; }
th.l, td.l { text-align: left; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .95em; }
.meta td, .meta th { border: none; padding: .1em 1em .1em 0; text-align: left; }
.meta th { background: none; font-weight: 600; }
.warn { background: #fff3cd; border: 1px solid #d9b44a; padding: .5em .8em; }
.totals { margin: .3em 0; }
.muted { color: #666; }
svg.chart { display: block; max-width: 100%; height: auto; border: 1px solid #ddd; margin: .3em 0 1.2em; }
svg.chart text { font-family: system-ui, sans-serif; font-size: 12px; fill: #333; }
</style>
</head>
<body>
<h1>Replay of <code>{{.Topic}}</code></h1>
<table class="meta">
<tr><th>Time range</th><td>{{.FromTo}}</td></tr>
<tr><th>Records</th><td>{{num .Records}}</td></tr>
<tr><th>Bytes</th><td>{{num .Bytes}}</td></tr>
<tr><th>Partitions</th><td>{{len .Partitions}}</td></tr>
</table>
{{- if .Partial}}
<p class="warn"><strong>Partial:</strong> the replay was stopped before the end of its range; the figures cover only what was read.</p>
{{- end}}
{{- with .Notes}}
<ul class="notes">
{{- range .}}
<li>{{.}}</li>
{{- end}}
</ul>
{{- end}}
{{- range .Cands}}
<h2>Candidate <code>{{.Name}}</code></h2>
<p class="totals">{{num .Total.Records}} records: {{num .Total.Accepted}} accepted ({{num .Total.Tagged}} tagged),
<strong>{{num .Total.Limited}} limited</strong> ({{num .Total.Overflow}} overflow, {{num .Total.Topic}} to a topic, {{num .Total.Dropped}} dropped),
{{num .Total.DeadLetter}} dead-lettered; {{num .Total.ShadowOver}} over a shadow rule.
{{num .KeysAffected}} keys affected.{{if .Folded}} {{num .Folded}} records folded (past the row budget of a minute: counted, in no key).{{end}}</p>
<h3>Rules</h3>
{{- if .Rules}}
<table>
<tr><th class="l">rule</th><th>accepted</th><th>tagged</th><th>overflow</th><th>topic</th><th>dropped</th><th>dead letter</th><th>shadow over</th></tr>
{{- range .Rules}}
<tr><td class="l">{{rule .Rule}}{{if .Shadow}} (shadow){{end}}</td><td>{{num .Accepted}}</td><td>{{num .Tagged}}</td><td>{{num .Overflow}}</td><td>{{num .Topic}}</td><td>{{num .Dropped}}</td><td>{{num .DeadLetter}}</td><td>{{num .ShadowOver}}</td></tr>
{{- end}}
</table>
{{- if named .Rules}}
<p class="muted">{{legend}}.</p>
{{- end}}
{{- else}}
<p class="muted">No rule acted on any record.</p>
{{- end}}
{{- with .Dead}}
<h3>Dead letters by reason</h3>
<table>
<tr><th class="l">reason</th><th>records</th></tr>
{{- range .}}
<tr><td class="l">{{reason .Reason}}</td><td>{{num .N}}</td></tr>
{{- end}}
</table>
{{- end}}
<h3>Most affected keys</h3>
{{- if .Keys}}
<table>
<tr><th class="l">rule</th><th class="l">key</th><th>limited</th><th>tagged</th><th>shadow over</th><th class="l">first limited</th><th class="l">last limited</th><th>peak ratio</th></tr>
{{- range .Keys}}
<tr><td class="l">{{rule .Rule}}{{if .Shadow}} (shadow){{end}}</td><td class="l"><code>{{key .Key}}</code></td><td>{{num .Limited}}</td><td>{{num .Tagged}}</td><td>{{num .ShadowOver}}</td><td class="l">{{minute .FirstLimited}}</td><td class="l">{{minute .LastLimited}}</td><td>{{ratio .PeakRatio}}</td></tr>
{{- end}}
</table>
{{- else}}
<p class="muted">No key was limited, tagged or over a shadow rule.</p>
{{- end}}
{{- if .Charts}}
<h3>Keys over time</h3>
{{- if .ChartMore}}
<p class="muted">Charts for the first {{len .Charts}} keys; {{num .ChartMore}} more are in the table only.</p>
{{- end}}
{{- range .Charts}}
<h4>{{rule .Key.Rule}}{{if .Key.Shadow}} (shadow){{end}} · <code>{{key .Key.Key}}</code></h4>
{{- with .SVG}}
{{- if .NoLevel}}
<p class="muted">Only a shadow rule was over it: the minutes it was over are shaded; it has no level of its own to draw (the records' decisions were another rule's).</p>
{{- end}}
{{template "chart" .}}
{{- else}}
<p class="muted">No minutes near its threshold.</p>
{{- end}}
{{- end}}
{{- end}}
{{- end}}
{{- if .ShowDiff}}
<h2>What <code>{{.NameA}}</code> changes, per team</h2>
<p class="muted">Records limited under each candidate; a negative change means <code>{{.NameA}}</code> limits the team less than <code>{{.NameB}}</code>.</p>
<table>
<tr><th class="l">team</th><th>limited under {{.NameA}}</th><th>under {{.NameB}}</th><th>change</th></tr>
{{- range .DiffRows}}
<tr><td class="l"><code>{{key .Team}}</code></td><td>{{num .A}}</td><td>{{num .B}}</td><td>{{signed .Change}}</td></tr>
{{- end}}
</table>
{{- if .DiffMore}}
<p class="muted">And {{num .DiffMore}} more teams.</p>
{{- end}}
{{- end}}
</body>
</html>
{{define "chart" -}}
<svg class="chart" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img">
<title>{{.Title}}</title>
<rect x="{{.X0}}" y="{{.Y0}}" width="{{.PlotW}}" height="{{.PlotH}}" fill="#ffffff" stroke="#999999"/>
{{- range .Shades}}
<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="` + shadeColour + `" fill-opacity="` + shadeOpacity + `"/>
{{- end}}
<line x1="{{.X0}}" y1="{{.YMid}}" x2="{{.X1}}" y2="{{.YMid}}" stroke="#dddddd" stroke-dasharray="4 4"/>
{{- range .Thresholds}}
<polyline points="{{.}}" fill="none" stroke="` + thresholdColour + `" stroke-width="2"/>
{{- end}}
{{- range .Levels}}
<polyline points="{{.}}" fill="none" stroke="` + levelColour + `" stroke-width="2" stroke-linejoin="round"/>
{{- end}}
{{- range .Dots}}
<circle cx="{{.X}}" cy="{{.Y}}" r="3.5" fill="` + levelColour + `"/>
{{- end}}
{{- if not .NoLevel}}
<text x="{{.LabelX}}" y="{{.Y0}}" text-anchor="end" dominant-baseline="middle">{{.YMaxLabel}}</text>
<text x="{{.LabelX}}" y="{{.YMid}}" text-anchor="end" dominant-baseline="middle">{{.YMidLabel}}</text>
<text x="{{.LabelX}}" y="{{.Y1}}" text-anchor="end" dominant-baseline="middle">0</text>
{{- end}}
<text x="{{.X0}}" y="{{.TimeY}}">{{.Start}}</text>
<text x="{{.X1}}" y="{{.TimeY}}" text-anchor="end">{{.End}}</text>
<g transform="translate({{.X0}} {{.LegendY}})">
{{- if .NoLevel}}
<rect x="0" y="-7" width="24" height="14" fill="` + shadeColour + `" fill-opacity="` + shadeOpacity + `"/>
<text x="30" y="0" dominant-baseline="middle">minutes with records over in shadow (no level of its own)</text>
{{- else}}
<line x1="0" y1="0" x2="24" y2="0" stroke="` + levelColour + `" stroke-width="2"/>
<text x="30" y="0" dominant-baseline="middle">level (the window count the gate compares)</text>
<line x1="320" y1="0" x2="344" y2="0" stroke="` + thresholdColour + `" stroke-width="2"/>
<text x="350" y="0" dominant-baseline="middle">threshold</text>
<rect x="440" y="-7" width="24" height="14" fill="` + shadeColour + `" fill-opacity="` + shadeOpacity + `"/>
<text x="470" y="0" dominant-baseline="middle">minutes with records limited, tagged or over in shadow</text>
{{- end}}
</g>
</svg>
{{- end}}`
