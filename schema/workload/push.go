package workload

// PushSecretCheckedAnnotation, on a SyncTarget, is kcp's record that the
// writer of spec.push was allowed to read the Secret it names
// ("<namespace>/<name>"). kcp runs a push-mode syncer only with the Secret
// recorded here; only kcp sets it (server/admission/pushsecret).
const PushSecretCheckedAnnotation = "workload.kcp.io/push-secret-checked"

// PushSecretRef is spec.push as "<namespace>/<name>" ("" without push).
func PushSecretRef(p *PushSpec) string {
	if p == nil || p.SecretName == "" {
		return ""
	}
	return p.SecretNamespace + "/" + p.SecretName
}
