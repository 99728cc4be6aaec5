package satokens

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestObjectCache(t *testing.T) {
	c := newObjectCache()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot", UID: "1"}}
	k := cacheKey("sa", "root:a", "apps", "robot")

	// Not live (watches not running): nothing is cached.
	c.put(k, sa, time.Now(), false)
	if _, ok := c.get(k); ok {
		t.Fatal("cached while not live")
	}
	c.live.Store(2)
	c.put(k, sa, time.Now(), true)
	if got, ok := c.get(k); !ok || got != sa {
		t.Fatal("not cached while live")
	}
	if _, ok := c.get(cacheKey("sa", "root:b", "apps", "robot")); ok {
		t.Fatal("another cluster's account answered from the cache")
	}
	// A change removes it.
	c.changed(k)
	if _, ok := c.get(k); ok {
		t.Fatal("served after a change")
	}
	// A GET begun before a change does not cache what it read.
	started := time.Now().Add(-time.Millisecond)
	c.changed(k)
	c.put(k, sa, started, true)
	if _, ok := c.get(k); ok {
		t.Fatal("a read from before a change was cached")
	}
	// One begun after it does.
	time.Sleep(time.Millisecond)
	c.put(k, sa, time.Now(), true)
	if _, ok := c.get(k); !ok {
		t.Fatal("a read from after the change was not cached")
	}
	// A GET begun while a watch was down (live at start false) is not cached.
	c.flush()
	c.put(k, sa, time.Now(), false)
	if _, ok := c.get(k); ok {
		t.Fatal("a read from while a watch was down was cached")
	}
	// A watch going down stops the cache.
	c.put(k, sa, time.Now(), true)
	c.live.Store(1)
	if _, ok := c.get(k); ok {
		t.Fatal("served while a watch was down")
	}
}
