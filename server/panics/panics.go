// Package panics decides what a panic outside a request does to the
// server: it is logged with its stack and counted, and the server goes on.
//
// One process serves every tenant, and tenants supply the objects that
// the shared machinery (admission policies compiled per workspace, CEL,
// informer handlers, controllers) works on. Upstream's components recover
// their goroutines with runtime.HandleCrash, which by default panics again
// and ends the process: one workspace's object would then stop the server
// for everyone, and again at every start once that object is stored. kcp
// turns the re-panic off (Install) and wraps its own controllers' work per
// key (Recover), so an object that makes some code panic is reported and
// skipped, not fatal. Panics in request handlers were already answered
// with a 500 by the handler chain.
package panics

import (
	"context"
	"fmt"
	"runtime/debug"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var recovered = metrics.NewCounterVec(&metrics.CounterOpts{
	Name:           "kcp_recovered_panics_total",
	Help:           "Panics outside requests that the server recovered from instead of exiting, by where they were caught (controller name, or runtime for upstream's goroutines). Each is logged with its stack.",
	StabilityLevel: metrics.ALPHA,
}, []string{"where"})

func init() { legacyregistry.MustRegister(recovered) }

// Install makes upstream's HandleCrash log and count a panic without
// ending the process. Call it once, first thing at start.
func Install() {
	utilruntime.ReallyCrash = false
	utilruntime.PanicHandlers = append(utilruntime.PanicHandlers, func(context.Context, interface{}) {
		recovered.WithLabelValues("runtime").Inc()
	})
}

// Error is a recovered panic as an error: its value and the stack where
// it happened.
type Error struct {
	Value any
	Stack []byte
}

func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Recover runs f and turns a panic in it into an *Error, counted under
// where. http.ErrAbortHandler and the like are not special here: Recover
// is for work off the request path.
func Recover(where string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			recovered.WithLabelValues(where).Inc()
			err = &Error{Value: r, Stack: debug.Stack()}
		}
	}()
	return f()
}
