package kind_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/kind"
	"github.com/syncd/syncd/sink"
)

func openNothing(context.Context, *config.Config) (sink.Sink, error) { return nil, errors.New("none") }

func TestNewRegistryRefusesAnIncompleteKind(t *testing.T) {
	for name, k := range map[string]kind.Kind{
		"no identity":                   {Type: "x", OpenSink: openNothing},
		"no open":                       {Type: "x", Identity: kind.DatabaseIdentity},
		"no type":                       {OpenSink: openNothing, Identity: kind.DatabaseIdentity},
		"registered twice, as postgres": kind.Postgres(),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("NewRegistry accepted the kind; want a panic at start")
				}
			}()
			kind.NewRegistry(kind.Postgres(), k)
		})
	}
}

func TestOfNamesTheKnownTypes(t *testing.T) {
	r := kind.NewRegistry(kind.Postgres()).With(kind.Kind{Type: "files", OpenSink: openNothing, Identity: kind.DatabaseIdentity})
	c := &config.Config{File: "a.yaml", Lines: map[string]int{"sink.type": 7}, Name: "a", Sink: config.Sink{Type: "kafka"}}
	_, err := r.Of(c)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), `a.yaml:7: sink.type: unknown sink type "kafka"; use one of files, postgres`) {
		t.Fatalf("Of = %v", err)
	}
	k, err := r.Of(&config.Config{Sink: config.Sink{Type: "files"}})
	if err != nil || k.Type != "files" {
		t.Fatalf("Of(files) = %v, %v", k.Type, err)
	}
	if err := k.NoReconcile(c); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "reconcile does not apply") {
		t.Fatalf("NoReconcile = %v", err)
	}
}

func TestIdentityLeavesThePasswordOut(t *testing.T) {
	c := &config.Config{Sink: config.Sink{Type: config.SinkPostgres, DSN: "postgres://u:s3cret@db.example:6432/shop"}}
	id := kind.Postgres().Identity(c)
	if id["sink.database"] != "db.example:6432/shop" {
		t.Fatalf("identity %v", id)
	}
	if s := kind.Postgres().Secrets(c); len(s) != 1 || s[0] != "s3cret" {
		t.Fatalf("secrets %v; want the password", s)
	}
}
