package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
)

func execCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}

func readBody(w *strings.Builder, resp *http.Response) (int64, error) { return io.Copy(w, resp.Body) }
