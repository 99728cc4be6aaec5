#!/usr/bin/env bash
# Regenerates go.mod's replace block for k8s.io/kubernetes: k/k points every
# k8s.io/<staging> module at ./staging; we map each to its published v0.X.Y.
# Usage: hack/replace-k8s.sh v1.37.2
set -euo pipefail
V=${1:?usage: replace-k8s.sh v1.37.2}
STAGING="v0.${V#v1.}"
(cd /tmp && go mod download -json "k8s.io/kubernetes@$V" >/dev/null)
KMOD=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$V.mod
sed -n '/^replace *(/,/^)/p' "$KMOD" | awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' |
while read -r m; do
  case "$m" in k8s.io/sample-*|k8s.io/code-generator|k8s.io/kms/*) continue;; esac
  go mod edit -replace "$m=$m@$STAGING"
done
go mod edit -require "k8s.io/kubernetes@$V"
