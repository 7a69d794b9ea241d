package cli

import (
	"context"
	"fmt"
)

func cmdReconcile(_ context.Context, env *Env, args []string) error {
	return fmt.Errorf("reconcile is not available in this build: %w", ErrUsage)
}
