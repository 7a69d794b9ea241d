package source

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// PlanCheck is what EXPLAIN says about the page query.
type PlanCheck struct {
	// Sorts is true when the plan sorts the rows: every page then reads and
	// sorts the whole matching table instead of walking an index.
	Sorts bool
	// Top is the outermost node types, for the message.
	Nodes []string
}

// CheckPlan explains the page query the way a run issues it (after a cursor)
// and reports whether it walks an index in cursor order.
func (r *Reader) CheckPlan(ctx context.Context) (PlanCheck, error) {
	after := make([]string, len(r.table.Cursor))
	for i, col := range r.table.Cursor {
		after[i] = sampleValue(col.Type)
	}
	q, params := r.readQuery(Position{After: after}, r.cfg.Source.PageSize)
	args := make([]any, len(params))
	for i, p := range params {
		args[i] = p
	}
	var raw []byte
	if err := r.conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
		return PlanCheck{}, fmt.Errorf("explain page query of %s: %w", r.table.Ident, err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) == 0 {
		return PlanCheck{}, fmt.Errorf("explain page query of %s: unreadable plan: %v", r.table.Ident, err)
	}
	var pc PlanCheck
	plans[0].Plan.walk(func(n *planNode) {
		pc.Nodes = append(pc.Nodes, n.Type)
		if strings.Contains(n.Type, "Sort") {
			pc.Sorts = true
		}
	})
	return pc, nil
}

type planNode struct {
	Type  string     `json:"Node Type"`
	Plans []planNode `json:"Plans"`
}

func (n *planNode) walk(fn func(*planNode)) {
	fn(n)
	for i := range n.Plans {
		n.Plans[i].walk(fn)
	}
}

// sampleValue is a low value of a cursor type, for EXPLAIN.
func sampleValue(typ string) string {
	switch baseType(typ) {
	case "timestamp with time zone", "timestamp without time zone", "date":
		return "2000-01-01"
	case "uuid":
		return "00000000-0000-0000-0000-000000000000"
	case "text", "character varying":
		return ""
	}
	return "0"
}
