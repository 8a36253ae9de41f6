package mcptoken

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// AnswerJSON is [States.Answer] for a round whose result an SDK sends as
// JSON: the result round returns is recorded as its JSON, and the first
// answer and every honest retry get the recorded JSON decoded by decode,
// so both are the same bytes on the wire. A result that does not encode
// is round's error. A record that does not decode is logged at Error and
// answered with the error the Integration's Refused returns for an
// Internal refusal.
func AnswerJSON[R any](ctx context.Context, s *States, caller, method, name string, args any, wire string, round func(ctx context.Context, state string) (any, error), decode func([]byte) (R, error)) (R, error) {
	var zero R
	out, err := s.Answer(ctx, caller, method, name, args, wire, func(ctx context.Context, plain string) ([]byte, error) {
		res, err := round(ctx, plain)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding the tool result: %w", s.in.Name, err)
		}
		return b, nil
	})
	if err != nil {
		return zero, err
	}
	res, err := decode(out)
	if err != nil {
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": a recorded tool result does not decode",
			NameAttr(method, name), slog.String("error", err.Error()))
		return zero, s.in.Refused(Refusal{Message: "server error answering requestState", Reason: err.Error(), Internal: true})
	}
	return res, nil
}
