// Package logicalcluster owns the name of a logical cluster: its syntax, the
// wildcard that stands for all clusters, and how a request carries its cluster
// through a context from the routing filter down to the storage layer.
package logicalcluster

import (
	"context"
	"fmt"
	"strings"
)

// Name is the path of a logical cluster: DNS-1123 labels joined by ':',
// always starting at "root" (root, root:acme, root:acme:web). The name is the
// storage key segment, so it must never contain '/'.
type Name string

const (
	// Root is the logical cluster that requests without a /clusters/ prefix reach.
	Root Name = "root"
	// Wildcard stands for every logical cluster; only read requests by
	// privileged identities may use it.
	Wildcard Name = "*"
	// SystemCRDs holds kcp's own CRDs (tenancy.kcp.io), which every
	// logical cluster serves. It is outside the root tree: no workspace
	// leads to it and only the server itself writes there.
	SystemCRDs Name = "system:crds"
	// Annotation is written by the storage layer on every stored object and
	// names the logical cluster the object lives in. Clients cannot set it.
	Annotation = "kcp.io/cluster"

	// MaxLength bounds the whole path so that keys stay reasonable.
	MaxLength = 253
	maxLabel  = 63
)

func (n Name) String() string { return string(n) }

// IsWildcard reports whether n stands for all logical clusters.
func (n Name) IsWildcard() bool { return n == Wildcard }

// Parent returns the path one level up; root has no parent.
func (n Name) Parent() (Name, bool) {
	i := strings.LastIndexByte(string(n), ':')
	if i < 0 {
		return "", false
	}
	return n[:i], true
}

// Base returns the last label of the path ("web" for root:acme:web).
func (n Name) Base() string {
	return string(n[strings.LastIndexByte(string(n), ':')+1:])
}

// Within reports whether n is tree or a workspace below it (root:acme:web
// is within root:acme; root:acme-2 is not).
func (n Name) Within(tree Name) bool {
	return n == tree || strings.HasPrefix(string(n), string(tree)+":")
}

// Join returns the child path n:label.
func (n Name) Join(label string) Name { return Name(string(n) + ":" + label) }

// Parse validates s as a logical cluster path (or the wildcard "*").
func Parse(s string) (Name, error) {
	if s == string(Wildcard) {
		return Wildcard, nil
	}
	if s == string(SystemCRDs) {
		return SystemCRDs, nil
	}
	if s == "" {
		return "", fmt.Errorf("logical cluster name must not be empty")
	}
	if len(s) > MaxLength {
		return "", fmt.Errorf("logical cluster name %q is longer than %d characters", s, MaxLength)
	}
	labels := strings.Split(s, ":")
	if labels[0] != string(Root) {
		return "", fmt.Errorf("logical cluster name %q must start with %q (for example root:team-a)", s, Root)
	}
	for _, l := range labels {
		if err := ValidateLabel(l); err != nil {
			return "", fmt.Errorf("logical cluster name %q: %v", s, err)
		}
	}
	return Name(s), nil
}

// ValidateLabel checks one segment of a path: a DNS-1123 label.
func ValidateLabel(l string) error {
	if l == "" {
		return fmt.Errorf("empty segment")
	}
	if len(l) > maxLabel {
		return fmt.Errorf("segment %q is longer than %d characters", l, maxLabel)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if alnum || (c == '-' && i > 0 && i < len(l)-1) {
			continue
		}
		return fmt.Errorf("segment %q must consist of lower case letters, digits and '-', starting and ending with a letter or digit", l)
	}
	return nil
}

type contextKey struct{}

// WithCluster returns a context that carries the logical cluster of a request.
func WithCluster(ctx context.Context, n Name) context.Context {
	return context.WithValue(ctx, contextKey{}, n)
}

// From returns the logical cluster a context carries.
func From(ctx context.Context) (Name, bool) {
	n, ok := ctx.Value(contextKey{}).(Name)
	return n, ok && n != ""
}
