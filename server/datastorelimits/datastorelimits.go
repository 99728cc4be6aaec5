// Package datastorelimits turns the datastore's own limits into the answers
// clients expect. An object larger than what the embedded kine accepts in one
// gRPC message fails there with ResourceExhausted, which the generic registry
// reported as 500; clients (and upstream's own body limit) expect 413
// RequestEntityTooLarge saying the object is too large.
package datastorelimits

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// RESTOptionsGetter wraps the stores of Delegate's options.
type RESTOptionsGetter struct{ Delegate generic.RESTOptionsGetter }

// Wrap returns getter whose stores report oversized objects as 413.
func Wrap(getter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	if getter == nil {
		return nil
	}
	return RESTOptionsGetter{Delegate: getter}
}

func (g RESTOptionsGetter) GetRESTOptions(gr schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.Delegate.GetRESTOptions(gr, example)
	if err != nil || opts.Decorator == nil {
		return opts, err
	}
	inner := opts.Decorator
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		s, destroy, err := inner(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		if err != nil {
			return nil, nil, err
		}
		return store{Interface: s, resource: gr}, destroy, nil
	}
	return opts, nil
}

type store struct {
	storage.Interface
	resource schema.GroupResource
}

func (s store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return s.mapped(s.Interface.Create(ctx, key, obj, out, ttl))
}

func (s store) GuaranteedUpdate(ctx context.Context, key string, dest runtime.Object, ignoreNotFound bool,
	pre *storage.Preconditions, tryUpdate storage.UpdateFunc, cached runtime.Object) error {
	return s.mapped(s.Interface.GuaranteedUpdate(ctx, key, dest, ignoreNotFound, pre, tryUpdate, cached))
}

// mapped reports a write the datastore refused for its size as 413.
func (s store) mapped(err error) error {
	if err == nil || !tooLarge(err) {
		return err
	}
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
		"the %s object is too large for the datastore (%v); store less in one object", s.resource, err))
}

func tooLarge(err error) bool {
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) && st.GRPCStatus().Code() == codes.ResourceExhausted {
		return true
	}
	// Errors that lost their gRPC status on the way keep its text.
	msg := err.Error()
	return strings.Contains(msg, "ResourceExhausted") || strings.Contains(msg, "larger than max")
}
