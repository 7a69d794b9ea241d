package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
)

// writePlot draws initial-sync throughput against page size (log scale)
// with the limit as a dashed line, in a PNG of its own making: a few
// lines, dots and a 3x5 pixel font, no dependency.
func writePlot(path string, pts []pagePoint, limit float64, rows int) error {
	const w, h = 720, 420
	const left, right, top, bottom = 90, 30, 50, 70
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fillRect(img, img.Bounds(), color.White)
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{200, 200, 200, 255}
	blue := color.RGBA{30, 90, 200, 255}
	red := color.RGBA{200, 40, 40, 255}

	ymax := limit
	for _, p := range pts {
		ymax = math.Max(ymax, p.rate)
	}
	ymax = niceCeil(ymax * 1.1)
	lo, hi := math.Log10(float64(pts[0].size)), math.Log10(float64(pts[len(pts)-1].size))
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	x := func(size float64) int {
		return left + int((math.Log10(size)-lo)/(hi-lo)*float64(w-left-right-20)) + 10
	}
	y := func(v float64) int { return h - bottom - int(v/ymax*float64(h-top-bottom)) }

	// Grid, axes and tick labels.
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		line(img, left, y(v), w-right, y(v), grey, 0)
		label := fmt.Sprintf("%.0fK", v/1000)
		text(img, left-8-textWidth(label, 2), y(v)-5, label, 2, black)
	}
	line(img, left, top, left, h-bottom, black, 0)
	line(img, left, h-bottom, w-right, h-bottom, black, 0)
	for _, p := range pts {
		px := x(float64(p.size))
		line(img, px, h-bottom, px, h-bottom+5, black, 0)
		l := fmt.Sprint(p.size)
		text(img, px-textWidth(l, 2)/2, h-bottom+10, l, 2, black)
	}
	// The limit, dashed, and syncd's points joined by lines.
	line(img, left, y(limit), w-right, y(limit), red, 8)
	text(img, w-right-textWidth("LIMIT (PSQL COPY PIPE)", 2), y(limit)-14, "LIMIT (PSQL COPY PIPE)", 2, red)
	for i, p := range pts {
		px, py := x(float64(p.size)), y(p.rate)
		if i > 0 {
			q := pts[i-1]
			line(img, x(float64(q.size)), y(q.rate), px, py, blue, 0)
		}
		fillRect(img, image.Rect(px-3, py-3, px+4, py+4), blue)
	}
	title := fmt.Sprintf("SYNCD INITIAL SYNC OF %s ROWS: ROWS/S BY PAGE SIZE", fmtRows(rows))
	text(img, (w-textWidth(title, 2))/2, 15, strings.ToUpper(title), 2, black)
	text(img, (w-textWidth("PAGE SIZE (ROWS, LOG SCALE)", 2))/2, h-30, "PAGE SIZE (ROWS, LOG SCALE)", 2, black)
	text(img, 8, top-20, "ROWS/S", 2, black)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.Color) {
	for yy := r.Min.Y; yy < r.Max.Y; yy++ {
		for xx := r.Min.X; xx < r.Max.X; xx++ {
			img.Set(xx, yy, c)
		}
	}
}

// line draws from (x0,y0) to (x1,y1); dash > 0 leaves every other dash
// of that length blank.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dash int) {
	n := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= n; i++ {
		if dash > 0 && (i/dash)%2 == 1 {
			continue
		}
		xx := x0 + (x1-x0)*i/n
		yy := y0 + (y1-y0)*i/n
		img.Set(xx, yy, c)
		img.Set(xx, yy+1, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// glyphs is a 3x5 pixel font: five rows of three bits per character.
var glyphs = map[rune][5]uint8{
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {7, 1, 7, 4, 7}, '3': {7, 1, 7, 1, 7},
	'4': {5, 5, 7, 1, 1}, '5': {7, 4, 7, 1, 7}, '6': {7, 4, 7, 5, 7}, '7': {7, 1, 1, 1, 1},
	'8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 7},
	'A': {2, 5, 7, 5, 5}, 'B': {6, 5, 6, 5, 6}, 'C': {7, 4, 4, 4, 7}, 'D': {6, 5, 5, 5, 6},
	'E': {7, 4, 6, 4, 7}, 'F': {7, 4, 6, 4, 4}, 'G': {7, 4, 5, 5, 7}, 'H': {5, 5, 7, 5, 5},
	'I': {7, 2, 2, 2, 7}, 'J': {1, 1, 1, 5, 7}, 'K': {5, 5, 6, 5, 5}, 'L': {4, 4, 4, 4, 7},
	'M': {5, 7, 7, 5, 5}, 'N': {6, 5, 5, 5, 5}, 'O': {7, 5, 5, 5, 7}, 'P': {7, 5, 7, 4, 4},
	'Q': {7, 5, 5, 7, 1}, 'R': {7, 5, 6, 5, 5}, 'S': {7, 4, 7, 1, 7}, 'T': {7, 2, 2, 2, 2},
	'U': {5, 5, 5, 5, 7}, 'V': {5, 5, 5, 5, 2}, 'W': {5, 5, 7, 7, 5}, 'X': {5, 5, 2, 5, 5},
	'Y': {5, 5, 2, 2, 2}, 'Z': {7, 1, 2, 4, 7},
	'.': {0, 0, 0, 0, 2}, ',': {0, 0, 0, 2, 4}, ':': {0, 2, 0, 2, 0}, '/': {1, 1, 2, 4, 4},
	'(': {1, 2, 2, 2, 1}, ')': {4, 2, 2, 2, 4}, '-': {0, 0, 7, 0, 0}, ' ': {},
}

func textWidth(s string, scale int) int { return len(s) * 4 * scale }

// text draws s with its top-left corner at (x, y), each font pixel scale
// pixels wide.
func text(img *image.RGBA, x, y int, s string, scale int, c color.Color) {
	for i, r := range s {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['-']
		}
		for row := range 5 {
			for col := range 3 {
				if g[row]&(4>>col) != 0 {
					px, py := x+i*4*scale+col*scale, y+row*scale
					fillRect(img, image.Rect(px, py, px+scale, py+scale), c)
				}
			}
		}
	}
}
