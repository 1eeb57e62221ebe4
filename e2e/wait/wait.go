// Package wait polls a condition until it holds, with a deadline: how the
// e2e suite and the demo wait for the cluster instead of sleeping.
package wait

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Poll checks cond every interval until it holds, ctx ends or timeout
// passes. A cond error is retried; the last one is part of the returned
// error.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil && !errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}
