package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// seriesStyle is each limiter's label and colour in the fidelity chart.
var seriesStyle = []struct {
	name, label string
	color       color.RGBA
}{
	{"ours", "capture gate", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
	{"reference", "reference cadence", color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}},
	{"local", "local-only per instance", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}},
	{"lua", "exact synchronous Lua", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}},
}

// drawFidelity draws admitted per window ÷ threshold over time for the gate and the
// baselines, with the threshold line, to path (SVG, or PNG by its extension).
func drawFidelity(series map[string][]point, path string) error {
	p := plot.New()
	p.Title.Text = "cap mode, 4 instances, one team at 2 × its limit"
	p.X.Label.Text = "window"
	p.Y.Label.Text = "admitted per window ÷ threshold"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	lastWindow, firstWindow, top := 0, -1, 1.0
	for _, st := range seriesStyle {
		pts := slices.Clone(series[st.name])
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b point) int { return a.window - b.window })
		xy := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			xy[i].X, xy[i].Y = float64(pt.window), pt.value
			lastWindow = max(lastWindow, pt.window)
			if firstWindow < 0 || pt.window < firstWindow {
				firstWindow = pt.window
			}
			top = max(top, pt.value)
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", st.name, err)
		}
		line.Color, points.Color = st.color, st.color
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(st.label, line, points)
	}
	threshold := plotter.NewFunction(func(float64) float64 { return 1 })
	threshold.Color = color.Gray{Y: 0x40}
	threshold.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(threshold)
	p.Legend.Add("threshold", threshold)
	p.X.Min, p.X.Max = float64(firstWindow)-0.5, float64(lastWindow)+0.5
	p.Y.Max = top * 1.35 // room for the legend above the highest line
	var ticks []plot.Tick
	for w := max(firstWindow, 0); w <= lastWindow; w++ {
		ticks = append(ticks, plot.Tick{Value: float64(w), Label: fmt.Sprint(w)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return nil
}
