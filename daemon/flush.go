package daemon

import (
	"time"

	"github.com/syncd/syncd/watermark"
)

// flushRecords writes the runs' pending records to the state file every
// watermark.FlushEvery (the daemon's store defers them: an idle run of each
// of a thousand sources would otherwise fsync the file each, see
// watermark.Store.DeferRecords), and once more when stop is closed, after
// the last run ended. The channel it returns is closed then.
func (d *daemon) flushRecords(stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	t := time.NewTicker(watermark.FlushEvery)
	flush := func() {
		if err := d.o.Store.Flush(); err != nil {
			d.log.Error("the runs' records could not be written to the state file; they are tried again, and the watermarks are written at once as always", "err", err)
		}
	}
	go func() {
		defer close(done)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				flush()
			case <-stop:
				flush()
				return
			}
		}
	}()
	return done
}
