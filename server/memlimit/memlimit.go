// Package memlimit sets the Go runtime's soft memory limit from the memory
// limit of the container kcp runs in. At start-up kcp fills its caches from
// every stored object and, with Go's default pacing, the heap may grow to
// about twice what stays live (docs/performance.md): a server with hundreds
// of thousands of workspaces in a container sized for what it keeps would be
// killed for running out of memory while starting. With a soft limit below
// the container's, the collector works harder near the limit instead.
//
// The limit is read from the process's cgroup (v2 memory.max or v1
// memory.limit_in_bytes), the smallest of its cgroup and of every parent
// cgroup visible to it, as a Kubernetes container's limit is set on its
// own cgroup or its pod's. A GOMEMLIMIT in the environment always wins, and
// a process without a cgroup memory limit keeps Go's default (no limit).
package memlimit

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// unlimited is the value from which a cgroup v1 limit means "none": the
// kernel reports its largest page-aligned value (9223372036854771712).
const unlimited = uint64(1) << 62

// FromCgroup returns the memory limit, in bytes, of the cgroup the process
// runs in and the file it was read from; 0 when there is none. fsys is the
// root of the file system (os.DirFS("/")); the process's cgroups are read
// from proc/self/cgroup and proc/self/mountinfo.
func FromCgroup(fsys fs.FS) (limit uint64, from string, err error) {
	dir, mount, file, ok, err := cgroup(fsys)
	if err != nil || !ok {
		return 0, "", err
	}
	// The limit of the process's cgroup and of each parent up to the root
	// of the mount: the smallest applies.
	for {
		if l, ok := readLimit(fsys, path.Join(dir, file)); ok && (limit == 0 || l < limit) {
			limit, from = l, "/"+path.Join(dir, file)
		}
		if dir == mount || dir == "." || dir == "" {
			return limit, from, nil
		}
		dir = path.Dir(dir)
	}
}

// Cgroup returns the directory of the process's memory cgroup (absolute)
// and the name of the limit file in it (memory.max or
// memory.limit_in_bytes); ok is false when the process has none.
func Cgroup(fsys fs.FS) (dir, limitFile string, ok bool, err error) {
	dir, _, limitFile, ok, err = cgroup(fsys)
	return "/" + dir, limitFile, ok, err
}

func cgroup(fsys fs.FS) (dir, mount, file string, ok bool, err error) {
	cgroups, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return "", "", "", false, err
	}
	mountinfo, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return "", "", "", false, err
	}
	dir, mount, file, ok = memoryCgroup(cgroups, mountinfo)
	return dir, mount, file, ok, nil
}

// memoryCgroup finds the directory (relative to /) of the process's memory
// cgroup, the mount point it is under, and the name of its limit file:
// cgroup v1's memory hierarchy where the memory controller is mounted as v1
// (the hybrid layout), else cgroup v2's unified hierarchy.
func memoryCgroup(cgroups, mountinfo []byte) (dir, mount, file string, ok bool) {
	// A cgroup path starts with "/": empty means the process has none.
	var v1, v2 string
	for _, line := range strings.Split(string(cgroups), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1 = parts[2]
		}
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// id parent major:minor root mount-point options [optional...] - type source super-options
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		root, point, fstype, super := fields[3], fields[4], fields[sep+1], fields[sep+3]
		switch {
		case fstype == "cgroup2" && v2 != "" && v1 == "":
			if d, ok := within(point, root, v2); ok {
				return d, strings.TrimPrefix(point, "/"), "memory.max", true
			}
		case fstype == "cgroup" && v1 != "" && slices.Contains(strings.Split(super, ","), "memory"):
			if d, ok := within(point, root, v1); ok {
				return d, strings.TrimPrefix(point, "/"), "memory.limit_in_bytes", true
			}
		}
	}
	return "", "", "", false
}

// within is the directory of cgroup path p under a mount of the hierarchy's
// root at point (a cgroup namespace shows the container's own cgroup as
// root "/"); ok is false when p is not below root.
func within(point, root, p string) (string, bool) {
	rel := p
	if root != "/" {
		if p != root && !strings.HasPrefix(p, root+"/") {
			return "", false
		}
		rel = strings.TrimPrefix(p, root)
	}
	return strings.TrimPrefix(path.Join(point, rel), "/"), true
}

// readLimit reads a limit file: a number of bytes, "max" (v2) or a value at
// or above unlimited (v1) being no limit.
func readLimit(fsys fs.FS, name string) (uint64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n >= unlimited {
		return 0, false
	}
	return n, true
}

// Decision is what Set did and why, for the start-up log.
type Decision struct {
	// Limit is the soft memory limit in effect (0: none).
	Limit int64
	// Reason says where it comes from.
	Reason string
}

// Set applies a soft memory limit of ratio times the cgroup's memory limit
// unless goMemLimit (the GOMEMLIMIT environment variable) is set or ratio
// is 0. cgroupLimit reads the cgroup's limit (FromCgroup).
func Set(ratio float64, goMemLimit string, cgroupLimit func() (uint64, string, error)) (Decision, error) {
	if !(ratio >= 0 && ratio <= 1) { // NaN too
		return Decision{}, fmt.Errorf("the memory limit ratio must be between 0 (off) and 1, not %v", ratio)
	}
	current := debug.SetMemoryLimit(-1)
	if goMemLimit != "" {
		return Decision{Limit: current, Reason: "GOMEMLIMIT=" + goMemLimit}, nil
	}
	if ratio == 0 {
		return Decision{Reason: "--memory-limit-ratio=0"}, nil
	}
	limit, from, err := cgroupLimit()
	if err != nil {
		return Decision{Reason: fmt.Sprintf("no cgroup memory limit could be read: %v", err)}, nil
	}
	if limit == 0 {
		return Decision{Reason: "no cgroup memory limit"}, nil
	}
	soft := int64(math.Min(float64(limit)*ratio, math.MaxInt64))
	debug.SetMemoryLimit(soft)
	return Decision{Limit: soft, Reason: fmt.Sprintf("%v of the cgroup memory limit %d in %s", ratio, limit, from)}, nil
}

// Active reports whether a soft memory limit is in effect (set by Set or
// by GOMEMLIMIT).
func Active() bool { return debug.SetMemoryLimit(-1) != math.MaxInt64 }
