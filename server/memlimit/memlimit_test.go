package memlimit

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

// The mountinfo lines of the layouts below, as the kernel writes them.
const (
	v2Mount     = "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	hybridMount = "25 24 0:22 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"26 24 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"27 24 0:24 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	procMount = "22 1 0:5 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
)

func TestFromCgroup(t *testing.T) {
	for _, c := range []struct {
		name      string
		files     map[string]string
		want      uint64
		wantFrom  string
		wantError bool
	}{{
		name: "cgroup v2 in a container (its cgroup namespace shows its own cgroup as /)",
		files: map[string]string{
			"proc/self/cgroup":           "0::/\n",
			"proc/self/mountinfo":        procMount + v2Mount,
			"sys/fs/cgroup/memory.max":   "4294967296\n",
			"sys/fs/cgroup/memory.high":  "max\n",
			"sys/fs/cgroup/cgroup.procs": "1\n",
		},
		want: 4 << 30, wantFrom: "/sys/fs/cgroup/memory.max",
	}, {
		name: "cgroup v2 on a host: the pod's limit is smaller than the container's none",
		files: map[string]string{
			"proc/self/cgroup":    "0::/kubepods.slice/pod1.slice/cri-abc.scope\n",
			"proc/self/mountinfo": v2Mount,
			"sys/fs/cgroup/kubepods.slice/pod1.slice/cri-abc.scope/memory.max": "max\n",
			"sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max":               "2147483648\n",
			"sys/fs/cgroup/kubepods.slice/memory.max":                          "17179869184\n",
		},
		want: 2 << 30, wantFrom: "/sys/fs/cgroup/kubepods.slice/pod1.slice/memory.max",
	}, {
		name: "cgroup v2 without any limit",
		files: map[string]string{
			"proc/self/cgroup":                       "0::/user.slice\n",
			"proc/self/mountinfo":                    v2Mount,
			"sys/fs/cgroup/user.slice/memory.max":    "max\n",
			"sys/fs/cgroup/user.slice/memory.weight": "100\n",
		},
	}, {
		name: "cgroup v1 and v2 side by side: the memory controller is v1's",
		files: map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/57cd\n1:cpu:/\n0::/\n",
			"proc/self/mountinfo": procMount + hybridMount,
			"sys/fs/cgroup/memory/process_api/57cd/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":      "25769803776\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                  "9223372036854771712\n",
			"sys/fs/cgroup/unified/memory.max":                            "1024\n",
		},
		want: 24 << 30, wantFrom: "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
	}, {
		name: "cgroup v1 without a limit (the kernel's largest value)",
		files: map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n0::/\n",
			"proc/self/mountinfo":                        hybridMount,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		},
	}, {
		name: "a cgroup mounted from a parent's root that does not hold the process",
		files: map[string]string{
			"proc/self/cgroup":         "0::/elsewhere\n",
			"proc/self/mountinfo":      "30 24 0:26 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory.max": "1024\n",
		},
	}, {
		name: "a cgroup namespace mounted at a path below the hierarchy's root",
		files: map[string]string{
			"proc/self/cgroup":             "0::/mine/app\n",
			"proc/self/mountinfo":          "30 24 0:26 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/app/memory.max": "1073741824\n",
			"sys/fs/cgroup/memory.max":     "garbage\n",
		},
		want: 1 << 30, wantFrom: "/sys/fs/cgroup/app/memory.max",
	}, {
		name:      "no /proc",
		files:     map[string]string{},
		wantError: true,
	}} {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range c.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			got, from, err := FromCgroup(fsys)
			if (err != nil) != c.wantError {
				t.Fatalf("error %v, want one: %v", err, c.wantError)
			}
			if got != c.want || from != c.wantFrom {
				t.Errorf("FromCgroup = %d from %q, want %d from %q", got, from, c.want, c.wantFrom)
			}
		})
	}
}

func TestSet(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	limit := func(n uint64, err error) func() (uint64, string, error) {
		return func() (uint64, string, error) { return n, "/sys/fs/cgroup/memory.max", err }
	}
	debug.SetMemoryLimit(math.MaxInt64)
	d, err := Set(0.9, "", limit(10<<30, nil))
	if err != nil || d.Limit != 9663676416 || debug.SetMemoryLimit(-1) != 9663676416 || !Active() {
		t.Fatalf("a 10 GiB cgroup at 0.9: %+v %v, runtime limit %d", d, err, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	for _, c := range []struct {
		ratio      float64
		env        string
		cgroup     func() (uint64, string, error)
		wantReason string
	}{
		{0.9, "19GiB", limit(10<<30, nil), "GOMEMLIMIT=19GiB"},
		{0, "", limit(10<<30, nil), "--memory-limit-ratio=0"},
		{0.9, "", limit(0, nil), "no cgroup memory limit"},
		{0.9, "", limit(0, errors.New("no /proc")), "no cgroup memory limit could be read: no /proc"},
	} {
		d, err := Set(c.ratio, c.env, c.cgroup)
		if err != nil || d.Reason != c.wantReason || debug.SetMemoryLimit(-1) != math.MaxInt64 || Active() {
			t.Errorf("Set(%v, %q): %+v %v, runtime limit %d; want %q and no limit set", c.ratio, c.env, d, err, debug.SetMemoryLimit(-1), c.wantReason)
		}
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if _, err := Set(bad, "", limit(10<<30, nil)); err == nil {
			t.Errorf("ratio %v accepted", bad)
		}
	}
}
