package deploy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
)

// TestDocsSourceExamples parses every source file shown in docs/DEPLOY.md
// (the ```yaml blocks) with the real loader, so that a reader can paste them.
func TestDocsSourceExamples(t *testing.T) {
	doc := readFile(t, "docs/DEPLOY.md")
	blocks := strings.Split(doc, "```yaml\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("docs/DEPLOY.md shows no source file")
	}
	for i, b := range blocks {
		body, _, ok := strings.Cut(b, "```")
		if !ok {
			t.Fatalf("docs/DEPLOY.md: yaml block %d is not closed", i+1)
		}
		for _, v := range varRefs(map[string]string{"": body}) {
			t.Setenv(v, dummyDSN)
		}
		if _, err := config.Parse(fmt.Sprintf("docs/DEPLOY.md yaml block %d", i+1), []byte(body)); err != nil {
			t.Error(err)
		}
	}
}
