package loadtest

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Values []float64 // one per x
}

var chartColors = []string{"#1f6feb", "#d1242f", "#2da44e", "#8250df"}

// ChartSVG draws series against xs (a log scale: sender counts) as a
// self-contained SVG line chart, for docs/performance.md.
func ChartSVG(title, xLabel, yLabel string, xs []float64, series []Series) string {
	const w, h, left, right, top, bottom = 720.0, 400.0, 70.0, 20.0, 40.0, 90.0
	maxY := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			maxY = math.Max(maxY, v)
		}
	}
	maxY = niceCeil(maxY * 1.05)
	lo, hi := math.Log(xs[0]), math.Log(xs[len(xs)-1])
	x := func(v float64) float64 {
		if hi == lo {
			return left
		}
		return left + (math.Log(v)-lo)/(hi-lo)*(w-left-right)
	}
	y := func(v float64) float64 { return h - bottom - v/maxY*(h-top-bottom) }

	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&sb, `<text x="%.0f" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", w/2, html.EscapeString(title))
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, left, w-right, y(v), y(v))
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	for _, xv := range xs {
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, x(xv), x(xv), top, h-bottom)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(xv), h-bottom+16, xv)
	}
	fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+w-right)/2, h-bottom+34, html.EscapeString(xLabel))
	fmt.Fprintf(&sb, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+h-bottom)/2, html.EscapeString(yLabel))
	for i, s := range series {
		color := chartColors[i%len(chartColors)]
		var pts []string
		for j, v := range s.Values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(xs[j]), y(v)))
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x(xs[j]), y(v), color)
		}
		fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		ly := h - bottom + 52 + float64(i)*16
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, left, left+24, ly-4, ly-4, color)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+30, ly, html.EscapeString(s.Name))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// niceCeil rounds v up to a round multiple of a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
