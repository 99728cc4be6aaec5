package physical

import "strings"

// NeverReadyImage is an image whose pods a physical cluster never makes
// ready (a bad image, as the kubelet would report one that cannot be
// pulled): kwok's pod-ready stage leaves pods whose first container runs
// it Pending, not Ready.
const NeverReadyImage = "registry.invalid/never-ready:1"

// podReadyStage is kwok's pod-ready stage with pods of NeverReadyImage
// left out of its selector.
func podReadyStage(stage string) string {
	const anchor = "  selector:\n    matchExpressions:\n"
	if !strings.Contains(stage, anchor) {
		panic("kwok's pod-ready stage has no selector to extend")
	}
	return strings.Replace(stage, anchor, anchor+
		"    - key: '.spec.containers.[0].image'\n"+
		"      operator: 'NotIn'\n"+
		"      values:\n"+
		"      - '"+NeverReadyImage+"'\n", 1)
}
