package syncer

import (
	"context"
	"time"

	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
	"github.com/syncd/syncd/watermark"
)

// marks writes the watermark in page order after each sink commit. When
// the sink commits asynchronously (sink.Deferred), a page's watermark waits
// until the sink reports its commit durable, so a crash of the sink's
// server never leaves the watermark ahead of the data; the pages in
// between are re-applied by the next run, which the upsert makes harmless.
type marks struct {
	store *watermark.Store
	name  string
	d     sink.Deferred // nil: every commit is durable when Apply returns
	queue []mark
	seq   int64
	saved []string // the cursor last written
	// done is called for each page, in order, once its watermark is
	// written (or, behind the watermark, once it is durable).
	done func(k mark, saved []string)
	// record, when set, is applied to the state with every watermark
	// written (plan.Plan.Record).
	record func(st *watermark.State)
	// last is when the watermark was last written: while a run streams
	// asynchronously committed pages, it is written at most every saveEvery
	// (each write is two fsyncs), and always when the run ends.
	last time.Time
}

// saveEvery bounds how often a streaming run writes its watermark; a killed
// process re-applies at most this much work, harmlessly.
const saveEvery = 200 * time.Millisecond

type mark struct {
	seq     int64
	page    int64 // the run's page number
	last    []string
	rows    int
	written int64
	deleted int64
	save    bool // false while re-reading the lookback window behind the watermark
}

func newMarks(store *watermark.Store, name string, dst sink.Sink, done func(k mark, saved []string)) *marks {
	m := &marks{store: store, name: name, done: done}
	if d, ok := dst.(sink.Deferred); ok {
		m.d = d
	}
	return m
}

// committed records a page the sink has committed and writes the watermark
// of the newest page that is durable.
func (m *marks) committed(p page.Page, pageNo int64, ar sink.Result, save bool) error {
	m.seq++
	m.queue = append(m.queue, mark{seq: m.seq, page: pageNo, last: p.Last, rows: p.Len(), written: ar.Written, deleted: ar.Deleted, save: save})
	durable := m.seq
	if m.d != nil {
		durable = m.d.Durable()
	}
	// Every page durable (a synchronous commit): write at once, as the
	// loop always did. Asynchronous pages still pending (a stream): write
	// the durable ones at most every saveEvery.
	if durable < m.seq && time.Since(m.last) < saveEvery {
		return nil
	}
	return m.saveUpTo(durable)
}

// flush makes every committed page durable and writes its watermark; the
// end of a run (caught up, or stopped) calls it, even when ctx is done.
func (m *marks) flush(ctx context.Context) error {
	if len(m.queue) == 0 {
		return nil
	}
	if m.d != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.d.Flush(fctx); err != nil {
			return err
		}
	}
	return m.saveUpTo(m.seq)
}

func (m *marks) saveUpTo(durable int64) error {
	var last []string
	var rows, read, written, deleted int64
	n := 0
	for n < len(m.queue) && m.queue[n].seq <= durable {
		k := m.queue[n]
		if k.save {
			last = k.last
			rows += int64(k.rows)
		}
		read += int64(k.rows)
		written += k.written
		deleted += k.deleted
		n++
	}
	// The counters are written with the watermark, also for pages behind
	// it, so that status and the metrics (OnPage) count the same rows.
	if last != nil || read > 0 {
		err := m.store.Update(m.name, func(st *watermark.State) error {
			if last != nil {
				st.Cursor = last
				st.From = ""
				if m.record != nil {
					m.record(st)
				}
			}
			st.TotalRows += rows
			st.TotalRead += read
			st.TotalWritten += written
			st.TotalDeleted += deleted
			return nil
		})
		if err != nil {
			return err
		}
		if last != nil {
			m.saved = last
		}
		m.last = time.Now()
	}
	if m.done != nil {
		for _, k := range m.queue[:n] {
			m.done(k, m.saved)
		}
	}
	m.queue = append(m.queue[:0], m.queue[n:]...)
	return nil
}
