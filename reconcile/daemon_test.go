package reconcile_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemonScheduledRepair runs the real daemon with
// reconcile: {schedule: "@every 1s", repair: true}: it repairs a changed,
// a missing and a hard-deleted row on its own.
func TestDaemonScheduledRepair(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t, 500, "reconcile:\n  schedule: \"@every 1s\"\n  repair: true")
	f.closeStore(t)
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'wrong' WHERE id = 5`)
	f.dst.Exec(t, `DELETE FROM public.items_copy WHERE id = 6`)
	f.src.Exec(t, `DELETE FROM public.items WHERE id = 7`)

	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "--config", f.cfgFile, "--state", f.stateFile, "--listen", "")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon exit: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("daemon did not stop on SIGTERM\n%s", out.String())
		}
	}
	defer stop()

	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := f.dst.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM public.items_copy WHERE (id = 5 AND t = 'wrong') OR id = 7`).Scan(&n)
		var missing bool
		if err == nil {
			err = f.dst.Pool.QueryRow(context.Background(), `SELECT NOT EXISTS (SELECT 1 FROM public.items_copy WHERE id = 6)`).Scan(&missing)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's scheduled reconcile did not repair the copy in 30 s\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	f.assertSameRows(t)

	stop()
	if !strings.Contains(out.String(), "scheduled reconcile") {
		t.Errorf("the daemon logged no scheduled reconcile:\n%s", out.String())
	}
}
