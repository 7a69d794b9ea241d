// Package sourceerr holds the typed errors that library packages return
// about one source, so that callers tell them apart with errors.As instead
// of reading their text: SourceError names the source it is about, and
// ResyncNeeded says that only a resync of the source (or restoring its old
// settings) gets it going again. The resync advice that syncd prints is
// written here and nowhere else.
package sourceerr

import "errors"

// Named is an error that names its source at its start ("source NAME: ...").
type Named interface {
	error
	SourceName() string
}

// SourceError is Err about source Source: "source SOURCE: ERR".
type SourceError struct {
	Source string
	Err    error
}

func (e *SourceError) Error() string      { return "source " + e.Source + ": " + e.Err.Error() }
func (e *SourceError) Unwrap() error      { return e.Err }
func (e *SourceError) SourceName() string { return e.Source }

// Name returns err naming source: err itself when it already names source
// (a Named in its chain), else err in a SourceError.
func Name(source string, err error) error {
	var n Named
	if errors.As(err, &n) && n.SourceName() == source {
		return err
	}
	return &SourceError{Source: source, Err: err}
}

// ResyncNeeded is the error of a source whose stored watermark cannot be
// resumed from. Error says Reason, then the resync of Source that fixes it
// (ResyncAdvice), then Alt.
type ResyncNeeded struct {
	Source string
	// Reason says what is wrong, up to and including the words that lead
	// to the advice ("...; the cursor changed: ").
	Reason string
	// Alt follows the advice: the other ways out ("(or --from)"), or "".
	Alt string
	// Err is the cause, for errors.Is and errors.As; it may be nil.
	Err error
}

func (e *ResyncNeeded) Error() string {
	s := e.Reason + ResyncAdvice(e.Source)
	if e.Alt != "" {
		s += " " + e.Alt
	}
	return s
}

func (e *ResyncNeeded) Unwrap() error { return e.Err }

// ResyncAdvice is the command that starts source afresh from the start of
// its table: "run `syncd resync --source SOURCE --from-start`".
func ResyncAdvice(source string) string {
	return "run `syncd resync --source " + source + " --from-start`"
}

// ResyncAllAdvice is the advice for a state file that cannot be used at
// all: every source it held must be started afresh.
const ResyncAllAdvice = "run `syncd resync --from-start` (or --from) for each source"
