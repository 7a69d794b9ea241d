package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestWritePlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	if dir := os.Getenv("PLOT_DIR"); dir != "" {
		path = filepath.Join(dir, "p.png")
	}
	pts := []pagePoint{{100, 90000, 0}, {500, 180000, 0}, {1000, 230000, 0}, {5000, 280000, 0}, {10000, 300000, 0}, {50000, 310000, 0}}
	if err := writePlot(path, pts, 330000, 1_000_000); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 720 || b.Dy() != 420 {
		t.Fatalf("plot is %v, want 720x420", b)
	}
}
