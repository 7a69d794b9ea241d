package syncer

import (
	"fmt"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/source"
	"github.com/syncd/syncd/watermark"
)

// Why an idle run need not re-read the whole lookback window.
//
// Lookback exists for rows the read bound cannot order: a writer whose
// clock runs up to lookback behind the source's, a bound: writers
// transaction that stamps now() up to lookback before its first write.
// Such a row still belongs to a transaction that starts (or first writes)
// on the source's clock, and its stamp is at most lookback behind that.
//
// Take a run R that read with a bound B that sees every writer (bound:
// transactions or writers, a role that sees every session, not a standby,
// not held at the watermark). A row no page of R could see belongs to a
// transaction that had not committed when that page was read, so it was
// open when B was computed (it started, or first wrote, at or after B:
// otherwise it would have held B back) or it started later (after the
// source's clock at B, which is at or after B). Either way its stamp is at
// or after B - lookback. Rows R could see at or after B have a cursor past
// the watermark R left; rows below R's start were, by the same argument for
// the run before, seen and copied. So once R has read every page from its
// start to its end, the next run only needs rows after the watermark W or
// stamped at or after B - lookback: it starts at the earlier of the two.
// When B - lookback is past W's first column it starts right after W, like
// any cursor read, and a run over unchanged data reads nothing, however
// many rows share W's timestamp.
//
// The bound is stored as watermark.State.LookbackBound when a run ends
// without error (it read every page from its start). A run that ends
// early (a crash, a failure, stop) leaves the stored bound as it was: the
// pages it committed moved the watermark only over rows it read, and any
// row it could not see is stamped at or after its own B - lookback, which
// is never below the stored one, because a run whose bound is lower (or
// not trusted) lowers (or clears) the stored bound before it reads its
// first page. Without a stored bound (a state from an older syncd, bound:
// off, a blind role, a standby, a run held at the watermark by a prepared
// transaction, after a resync) a run starts at W - lookback as before.

// trustedBound is the bound b as text when it sees every writer that can
// commit rows below it (see above), "" otherwise.
func trustedBound(c *config.Config, t *source.Table, b source.Bound) string {
	if !t.Temporal || c.Source.Bound == config.BoundOff || b.Hold || b.Blind || b.Standby || b.At.IsZero() {
		return ""
	}
	return b.Value
}

// Why the lookback window need not be read again row by row.
//
// The window from B - lookback to W still holds every row the last run R
// read there. Take X, the oldest transaction still running on the source
// when R read its bound (source.Seen, stored as LookbackXmin): every
// transaction below X had ended before any page of R was read, so every
// page of R saw what it wrote. A row version at or before W written below
// X was therefore read by R (it lies between R's start and W, which R read
// page by page to the end) or, below R's start, by a run before it (the
// argument above). The next run leaves those rows out of the window and
// reads only the versions written at or after X: the late commits the
// window is for, and every change since. age() compares the 32-bit ids
// from the same point, so a version at or after X is never left out; an
// id more than 2^30 behind the current run's X, a source that restarted
// (a failover or a restore can hand ids out again) or an unknown X turns
// the filter off for a run, which then reads the whole window as before.
// A stored bound older than the newest (a crash lost the newest record)
// comes with its own X and is as safe: the runs after it read on from
// where it stopped.

// lookbackStart moves a start position that re-reads the lookback window
// behind the watermark (pos, from startPosition) to the earlier of the
// watermark and the stored bound minus lookback, leaving out the rows the
// last run read when the source's transaction ids allow it (cur: this
// run's).
func lookbackStart(st watermark.State, pos source.Position, cur source.Seen) source.Position {
	if st.Cursor == nil || pos.After != nil || pos.Lookback <= 0 || st.LookbackBound == "" {
		return pos
	}
	b, ok := pgutil.ParseTime(st.LookbackBound)
	w, wok := pgutil.ParseTime(st.Cursor[0])
	if !ok || !wok {
		return pos
	}
	if b.Add(-pos.Lookback).After(w) {
		return source.Position{After: st.Cursor}
	}
	start := source.Position{AtLeast: st.LookbackBound, Lookback: pos.Lookback}
	if seenUsable(st, cur) {
		start.Seen = &source.SeenBefore{Xmin: st.LookbackXmin, Upto: st.Cursor}
	}
	return start
}

// seenUsable reports whether the stored LookbackXmin still tells which
// rows the last run read: the same server run, and an id at most 2^30
// behind this run's.
func seenUsable(st watermark.State, cur source.Seen) bool {
	return st.LookbackXmin > 0 && cur.Xmin > 0 && !st.LookbackServer.IsZero() && st.LookbackServer.Equal(cur.Server) &&
		st.LookbackXmin <= cur.Xmin && cur.Xmin-st.LookbackXmin < 1<<30
}

// lowerLookbackBound makes the stored bound safe for this run before it
// reads its first page: a run that commits pages and then ends early leaves
// the stored bound, so it must be no higher than this run's own (now) and
// unknown when this run's bound is not trusted or it starts without a
// watermark. It writes the state only when that changes the stored bound.
func lowerLookbackBound(store *watermark.Store, name string, st watermark.State, now string) error {
	if st.LookbackBound == "" {
		return nil
	}
	lower := ""
	if st.Cursor != nil && now != "" {
		old, ok := pgutil.ParseTime(st.LookbackBound)
		b, bok := pgutil.ParseTime(now)
		if ok && bok && !b.Before(old) {
			return nil
		}
		if ok && bok {
			lower = now
		}
	}
	err := store.Update(name, func(s *watermark.State) error {
		s.LookbackBound, s.LookbackXmin, s.LookbackServer = lower, 0, time.Time{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lower the stored read bound of %s before reading: %w", name, err)
	}
	return nil
}
