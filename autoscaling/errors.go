package autoscaling

import "errors"

// The kinds of error the core returns. externalgrpc maps each to one gRPC
// code; wrap them with %w and a message that says what to do.
var (
	// ErrUnknownGroup: the request names a group this plugin doesn't serve.
	ErrUnknownGroup = errors.New("unknown node group")
	// ErrInvalidArgument: the request itself is wrong (delta sign, a node of
	// another group).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition: the request is well formed but the group's state
	// forbids it (above max, below min, nothing to cancel).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: the core can't answer yet (no successful List of the
	// provider since start) or is shutting down.
	ErrUnavailable = errors.New("unavailable")
)
