package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"
)

// series is one row of values of a chart, drawn in its CSS class.
type series struct {
	Name   string
	Class  string
	Values []int64
}

// hourlyChart draws series over hours as grouped bars, as inline SVG: one
// group per hour, one bar per series, a tooltip (<title>) per bar. Labels
// are escaped; everything else is numbers.
func hourlyChart(title string, hours []time.Time, ss []series) template.HTML {
	const width, height, left, bottom, top = 720.0, 170.0, 44.0, 22.0, 8.0
	var maxV int64
	for _, s := range ss {
		for _, v := range s.Values {
			maxV = max(maxV, v)
		}
	}
	plotH := height - bottom - top
	slot := (width - left) / float64(max(len(hours), 1))
	bar := slot * 0.8 / float64(max(len(ss), 1))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, width, height, html.EscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, left, height-bottom, width, height-bottom)
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%d</text>`, left-4, top+8, maxV)
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">0</text>`, left-4, height-bottom)
	for i, h := range hours {
		x0 := left + float64(i)*slot + slot*0.1
		for j, s := range ss {
			v := s.Values[i]
			if v == 0 {
				continue
			}
			bh := plotH * float64(v) / float64(maxV)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s %s: %d</title></rect>`,
				s.Class, x0+float64(j)*bar, height-bottom-bh, bar, bh,
				h.UTC().Format("Jan 2 15:00"), html.EscapeString(s.Name), v)
		}
		if len(hours) <= 25 && i%3 == 0 || len(hours) > 25 && h.UTC().Hour() == 0 {
			label := h.UTC().Format("15h")
			if len(hours) > 25 {
				label = h.UTC().Format("Jan 2")
			}
			fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">%s</text>`, x0, height-6, label)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built above from escaped labels and numbers
}

// stackedRow is one bar of a stackedChart: its label and a value per
// segment.
type stackedRow struct {
	Label  string
	Values []int64
}

// segment names and styles one part of a stacked bar.
type segment struct {
	Name  string
	Class string
}

// stackedChart draws one horizontal stacked bar per row, as inline SVG,
// every bar scaled to the largest total.
func stackedChart(title string, segs []segment, rows []stackedRow) template.HTML {
	const width, rowH, labelW = 720.0, 22.0, 260.0
	height := rowH*float64(len(rows)) + 4
	var maxT int64
	for _, r := range rows {
		var t int64
		for _, v := range r.Values {
			t += v
		}
		maxT = max(maxT, t)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, width, height, html.EscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(title))
	for i, r := range rows {
		y := float64(i) * rowH
		fmt.Fprintf(&b, `<text class="label" x="0" y="%.1f">%s</text>`, y+15, html.EscapeString(ellipsis(r.Label, 40)))
		x := labelW
		var total int64
		for j, v := range r.Values {
			total += v
			if v == 0 || maxT == 0 {
				continue
			}
			w := (width - labelW - 60) * float64(v) / float64(maxT)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d</title></rect>`,
				segs[j].Class, x, y+3, w, rowH-6, html.EscapeString(segs[j].Name), v)
			x += w
		}
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">%d</text>`, x+4, y+15, total)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built above from escaped labels and numbers
}

// ellipsis shortens s to n runes.
func ellipsis(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
