package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/syncd/syncd/internal/sourceerr"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/runlock"
	"github.com/syncd/syncd/watermark"
)

// identityKeys are the config keys whose values give a watermark its
// meaning, in the order a message names them. A watermark computed with
// one value of any of them is wrong for another: a new sink table resumed
// from an old watermark would miss every row before it.
var identityKeys = []string{
	"source.table", "source.cursor", "source.where", "source.columns", "source.deleted_column",
	"sink.type", "sink.database", "sink.table", "sink.key", "sink.keep_deleted", "sink.campaign",
}

// IdentityOf returns the identity of the watermark that c's runs write to
// a sink of kind k: its settings normalised (schema-qualified tables, the
// where clause with its blanks collapsed, and what k.Identity says names the
// place it writes, such as the sink's host, port and database without user
// or password) and a fingerprint of them.
func IdentityOf(k kind.Kind, c *config.Config) watermark.Identity {
	s := map[string]string{
		"source.table":          c.Source.Ident.String(),
		"source.cursor":         namesText(c.Source.Cursor),
		"source.where":          whereText(c.Source.Where),
		"source.columns":        namesText(slices.Sorted(slices.Values(c.Source.Columns))),
		"source.deleted_column": c.Source.DeletedColumn,
		"sink.type":             c.Sink.Type,
		"sink.table":            c.Sink.Ident.String(),
		"sink.key":              namesText(c.Sink.Key),
		"sink.keep_deleted":     strconv.FormatBool(c.Sink.KeepDeleted),
	}
	if s["source.columns"] == "" {
		s["source.columns"] = "*"
	}
	for key, v := range k.Identity(c) {
		s[key] = v
	}
	raw, _ := json.Marshal(s) // map keys are sorted: the same settings give the same bytes
	sum := sha256.Sum256(raw)
	return watermark.Identity{Fingerprint: hex.EncodeToString(sum[:12]), Settings: s}
}

// CheckIdentity refuses to resume c from the stored state st when st was
// computed for other settings. A state without a watermark, or written
// before syncd recorded identities, is not refused: the run adopts c's
// identity. A coupon campaign with a new sink.campaign is a new campaign
// and is not refused either. The error is a config error (exit 2) naming
// the keys that changed, the state file and the command that resets it.
//
// A source in compare mode resumes from nothing: it is never refused.
func CheckIdentity(k kind.Kind, c *config.Config, st watermark.State, statePath string) error {
	if st.Identity == nil || !hasWatermark(st) || c.Compare() {
		return nil
	}
	cur := IdentityOf(k, c)
	if cur.Fingerprint == st.Identity.Fingerprint || newCampaign(k, c, st.Identity) {
		return nil
	}
	changed := identityDiff(st.Identity.Settings, cur.Settings)
	if !c.SecretsLoaded() {
		// Loaded without its DSNs (status): the sink's database is unknown
		// here, every other setting is compared; the next run checks all.
		// A pattern source's default sink.key (the table's primary key)
		// is unknown too.
		// So is the primary key a pattern source's table appends to a
		// cursor whose last column is not unique there (source.ExpandAll).
		changed = slices.DeleteFunc(changed, func(k string) bool {
			return k == "sink.database" || (k == "sink.key" && len(c.Sink.Key) == 0) ||
				(k == "source.cursor" && c.Pattern != "" && strings.HasPrefix(st.Identity.Settings[k], cur.Settings[k]+","))
		})
		if len(changed) == 0 {
			return nil
		}
	}
	key := "name"
	if len(changed) > 0 {
		key = changed[0]
	}
	var diff []string
	for _, k := range changed {
		diff = append(diff, fmt.Sprintf("%s %s → %s", k, shown(st.Identity.Settings[k]), shown(cur.Settings[k])))
	}
	if len(diff) == 0 {
		diff = append(diff, "settings this syncd cannot name")
	}
	if k.Campaign {
		return c.Errorf(key, "campaign %s of source %s was started with other settings (%s; recorded in %s): a frozen campaign cannot change its targets or grants table, or members would be granted twice or never; restore the config, or start a new campaign with a new sink.campaign id",
			c.Sink.Campaign, c.Name, strings.Join(diff, "; "), statePath)
	}
	return c.ErrorAt(key, &sourceerr.ResyncNeeded{Source: c.Name, Alt: "(or --from TIME) to start it afresh with these settings, or restore the old ones",
		Reason: fmt.Sprintf("the watermark of source %s in %s was computed for other settings (%s); resuming from it would skip every row before it: ",
			c.Name, statePath, strings.Join(diff, "; "))})
}

// adoptIdentity records c's identity in the state of c.Name when the
// stored one differs (none yet, an old state, a state without watermark or
// a new campaign). CheckIdentity has passed, so the watermark, if any, is
// the one these settings continue from.
func adoptIdentity(store *watermark.Store, k kind.Kind, c *config.Config, st watermark.State) error {
	id := IdentityOf(k, c)
	if st.Identity != nil && st.Identity.Fingerprint == id.Fingerprint {
		return nil
	}
	return store.Update(c.Name, func(st *watermark.State) error {
		if k.Campaign && st.Campaign != "" && st.Campaign != c.Sink.Campaign {
			// A new campaign: its first granted page records it (and binds
			// the identity); until then the old one's progress is not shown.
			st.Cursor, st.From, st.TotalRows, st.Campaign = nil, "", 0, ""
		}
		st.Identity = &id
		return nil
	})
}

// LockTarget is what the run lock of c stands for: the source's name and
// what its runs write, so that two different sources sharing a name do not
// lock each other out, and the identity tells a second process of the same
// source from a different source.
func LockTarget(k kind.Kind, c *config.Config) runlock.Target {
	w := c.Sink.Ident.String()
	if k.Campaign {
		w += " campaign " + c.Sink.Campaign
	}
	return runlock.Target{Source: c.Name, Writes: w, Identity: IdentityOf(k, c).Fingerprint}
}

// hasWatermark reports whether st holds a position to resume from.
func hasWatermark(st watermark.State) bool {
	return st.Cursor != nil || st.From != "" || st.Campaign != ""
}

// newCampaign reports whether c is a coupon campaign other than the one
// the stored identity belongs to.
func newCampaign(k kind.Kind, c *config.Config, old *watermark.Identity) bool {
	return k.Campaign && old.Settings["sink.type"] == c.Sink.Type &&
		old.Settings["sink.campaign"] != c.Sink.Campaign
}

// identityDiff lists the keys whose values differ, in identityKeys order
// (then the others, a kind's own or ones this build does not know, sorted).
func identityDiff(old, cur map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range identityKeys {
		seen[k] = true
		if old[k] != cur[k] {
			out = append(out, k)
		}
	}
	rest := slices.Sorted(maps.Keys(old))
	for k := range cur {
		if _, ok := old[k]; !ok {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		if !seen[k] && old[k] != cur[k] {
			out = append(out, k)
		}
	}
	return out
}

func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return strconv.Quote(v)
}

// namesText joins column names, quoting one that holds a comma, a quote or
// a blank so that different lists never print alike.
func namesText(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		if strings.ContainsAny(n, `,"' `) || n == "" {
			n = strconv.Quote(n)
		}
		out[i] = n
	}
	return strings.Join(out, ",")
}

// whereText collapses runs of blanks outside single-quoted literals, so
// that re-indenting a where clause in YAML does not change the identity.
func whereText(s string) string {
	var b strings.Builder
	quoted, blank := false, false
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r == '\'':
			quoted = !quoted
		case !quoted && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			blank = true
			continue
		}
		if blank {
			b.WriteByte(' ')
			blank = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
