package ctokenmcpgo

import (
	"io"
	"log/slog"
	"errors"
)

var errUnexpected = errors.New("handler saw an unexpected state")

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
