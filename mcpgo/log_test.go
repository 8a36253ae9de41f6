package ctokenmcpgo

import (
	"errors"
	"io"
	"log/slog"
)

var errUnexpected = errors.New("handler saw an unexpected state")

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
