package clusterreconcile

import (
	"fmt"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestClientsAreKeptPerClusterAndBounded(t *testing.T) {
	c, err := NewClients(&rest.Config{Host: "https://kcp.example:6443/clusters/root"}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Config("root:a").Host; h != "https://kcp.example:6443/clusters/root:a" {
		t.Errorf("Config(root:a).Host = %q", h)
	}
	a1, _ := c.Cluster("root:a")
	a2, _ := c.Cluster("root:a")
	b, _ := c.Cluster("root:b")
	if a1 != a2 || a1 == b {
		t.Error("want one client per cluster, reused")
	}
	for i := 0; i < DefaultClientCacheSize+10; i++ {
		if _, err := c.Cluster(logicalcluster.Name(fmt.Sprintf("root:c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if c.lru.Len() != DefaultClientCacheSize || len(c.byKey) != DefaultClientCacheSize {
		t.Errorf("cache holds %d/%d clients, want %d", c.lru.Len(), len(c.byKey), DefaultClientCacheSize)
	}
	if a3, _ := c.Cluster("root:a"); a3 == a1 {
		t.Error("root:a should have been evicted")
	}
}

func TestRequestString(t *testing.T) {
	r := Request{Cluster: "root:a"}
	r.Namespace, r.Name = "default", "cm"
	if r.String() != "root:a|default/cm" {
		t.Errorf("String() = %q", r.String())
	}
}
