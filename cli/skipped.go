package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/ops"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// recordMatches records in the state file, for each pattern source that
// run --once matched whole (not one NAME.TABLE of it), the tables it
// skipped: status shows them from there.
func recordMatches(store *watermark.Store, raw []*config.Config, name string, skipped []source.Skipped) error {
	now := time.Now()
	for _, p := range raw {
		if !p.IsPattern() || name != "" && name != p.Name {
			continue
		}
		var mine []source.Skipped
		for _, s := range skipped {
			if strings.HasPrefix(s.Name, p.Name+".") {
				mine = append(mine, s)
			}
		}
		if err := ops.RecordMatch(store, p.Name, now, ops.Skipped(mine)); err != nil {
			return err
		}
	}
	return nil
}

// printSkipped names each table a pattern source skips, with the reason,
// under the status table.
func printSkipped(env *Env, st ops.Status) {
	for _, s := range st.Skipped {
		fmt.Fprintf(env.Stdout, "%s: skipped by pattern source %s (%s, recorded %s): %s; fix it or add %s to source.exclude\n",
			s.Source, s.Pattern, s.Reason, cmpStr(s.RecordedAt, "-"), oneLine(s.Message), s.Table)
	}
}
