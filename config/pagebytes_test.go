package config

import (
	"errors"
	"strings"
	"testing"
)

// source.page_bytes defaults to 16MB, takes a size, and a size out of
// 64kB..1GB (or not a size) is a config error naming the file, line and key.
func TestPageBytes(t *testing.T) {
	c, err := Parse("customers.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.PageBytes.Bytes != DefaultPageBytes || DefaultPageBytes != 16<<20 {
		t.Fatalf("page_bytes unset: %d, want 16MB", c.Source.PageBytes.Bytes)
	}
	with := func(v string) string {
		return strings.Replace(valid, "  page_size: 500\n", "  page_size: 500\n  page_bytes: "+v+"\n", 1)
	}
	if c, err := Parse("customers.yaml", []byte(with("4MB"))); err != nil || c.Source.PageBytes.Bytes != 4<<20 {
		t.Fatalf("page_bytes: 4MB: %v, %+v", err, c)
	}
	for v, want := range map[string]string{
		"1kB":  `customers.yaml:11: source.page_bytes: 1kB is out of range; use 64kB to 1GB`,
		"2GB":  `customers.yaml:11: source.page_bytes: 2GB is out of range; use 64kB to 1GB`,
		"lots": `customers.yaml:11: source.page_bytes: want a size such as 16MB, 512kB or 1GB, got "lots"`,
	} {
		_, err := Parse("customers.yaml", []byte(with(v)))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("page_bytes: %s: %v, want %q", v, err, want)
		}
	}
}
