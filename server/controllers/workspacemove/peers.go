package workspacemove

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/server/movepeer"
	"github.com/kcpsql/kcp/server/shards"
)

// peers call the shards' move API, this shard's own included.
type peers struct {
	m  *shards.Membership
	mu sync.Mutex
	by map[string]*http.Client
}

// peerError is an answer of a shard other than 200.
type peerError struct {
	shard string
	code  int
	msg   string
}

func (e *peerError) Error() string { return fmt.Sprintf("shard %s: %s", e.shard, e.msg) }

func (p *peers) call(ctx context.Context, shard, call string, req movepeer.Request, out interface{}) error {
	p.mu.Lock()
	c, ok := p.by[shard]
	if !ok {
		cfg, err := p.m.Peer(shard)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		cfg = rest.CopyConfig(cfg)
		cfg.Timeout = 10 * time.Minute
		if c, err = rest.HTTPClientFor(cfg); err != nil {
			p.mu.Unlock()
			return err
		}
		if p.by == nil {
			p.by = map[string]*http.Client{}
		}
		p.by[shard] = c
	}
	p.mu.Unlock()
	s, _ := p.m.Config.Get(shard)
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+movepeer.Prefix+call, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(hr)
	if err != nil {
		return fmt.Errorf("shard %s: %w", shard, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("shard %s: %w", shard, err)
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		msg := string(raw)
		if json.Unmarshal(raw, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return &peerError{shard: shard, code: resp.StatusCode, msg: msg}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
