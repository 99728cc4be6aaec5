package namespacedefaults

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/client/clusterinformer"
)

// changes is a reflector's store that keeps nothing: it passes what the
// watch says on (one entry per object would be a cache of every
// namespace's defaults, which the controller needs only when one changes).
type changes struct {
	onChange func(obj interface{}) // added or updated
	onDelete func(obj interface{})

	once   sync.Once
	synced chan struct{}
}

func (c *changes) Add(obj interface{}) error { return c.Update(obj) }
func (c *changes) Update(obj interface{}) error {
	if c.onChange != nil {
		c.onChange(obj)
	}
	return nil
}
func (c *changes) Delete(obj interface{}) error {
	if c.onDelete != nil {
		c.onDelete(obj)
	}
	return nil
}
func (c *changes) Replace(list []interface{}, _ string) error {
	c.once.Do(func() { close(c.synced) })
	return nil
}
func (c *changes) Resync() error { return nil }

// watchOnly runs a reflector into changes; it has synced after its first
// list.
type watchOnly struct {
	reflector *cache.Reflector
	store     *changes
}

func newWatchOnly(lw cache.ListerWatcher, obj runtime.Object, store *changes) *watchOnly {
	store.synced = make(chan struct{})
	return &watchOnly{reflector: cache.NewReflectorWithOptions(clusterinformer.Whole(lw), obj, store, cache.ReflectorOptions{}), store: store}
}

func (w *watchOnly) RunWithContext(ctx context.Context) { w.reflector.RunWithContext(ctx) }
func (w *watchOnly) Run(stopCh <-chan struct{})         { w.reflector.Run(stopCh) }
func (w *watchOnly) HasSynced() bool {
	select {
	case <-w.store.synced:
		return true
	default:
		return false
	}
}
func (w *watchOnly) HasSyncedChecker() cache.DoneChecker { return synced{w.store.synced} }
func (w *watchOnly) LastSyncResourceVersion() string     { return w.reflector.LastSyncResourceVersion() }

type synced struct{ ch chan struct{} }

func (s synced) Name() string          { return "namespace defaults watch" }
func (s synced) Done() <-chan struct{} { return s.ch }
