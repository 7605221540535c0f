package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/wharfhq/wharf/internal/ops"
)

// errHelp is returned by a command that printed its usage because it was
// asked to (-h, -help): wharf exits 0.
var errHelp = errors.New("help shown")

// newFlagSet returns the flag set of `wharf <name>`, printing its usage
// (synopsis after the name, then the flags) to the command's error output.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.errOut)
	fs.Usage = func() {
		fmt.Fprintf(e.errOut, "usage: wharf %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseInterleaved parses fs's flags wherever they stand among args and
// returns the positional arguments: `replay ID -queue q` and
// `replay -queue q ID` mean the same. -h and -help print the usage and
// return errHelp.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		} else if err != nil {
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// durationValue is a duration flag read by ops.ParseDuration ("90d",
// "1d12h", "72h") and written by ops.Duration.
type durationValue time.Duration

func (d *durationValue) String() string { return ops.Duration(time.Duration(*d)) }

func (d *durationValue) Set(s string) error {
	v, err := ops.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// durationVar declares a duration flag on fs.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage+" (a `duration`: 90m, 24h, 7d, 1d12h)")
}

// duration declares a duration flag on fs and returns where it is stored.
func duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	durationVar(fs, p, name, value, usage)
	return p
}

// nextPage is the command line of the page after cursor: fs's command with
// every flag the operator set (its filters), -after replaced.
func nextPage(fs *flag.FlagSet, cursor string) string {
	args := []string{"wharf", fs.Name()}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "after" {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if f.Value.String() == "true" {
				args = append(args, "-"+f.Name)
			} else {
				args = append(args, "-"+f.Name+"="+f.Value.String())
			}
			return
		}
		args = append(args, "-"+f.Name, shellQuote(f.Value.String()))
	})
	return strings.Join(append(args, "-after", shellQuote(cursor)), " ")
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and -_.,:/@%+=.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// timeValue is a point-in-time flag: a duration before now ("24h", "7d")
// or an RFC 3339 time; empty is the zero time.
type timeValue struct {
	text string
	at   time.Time
	now  func() time.Time
}

// pointInTime declares a point-in-time flag on fs with a default (text
// either form takes, or "") and returns where it is stored.
func pointInTime(fs *flag.FlagSet, name, value, usage string) *timeValue {
	v := &timeValue{now: time.Now}
	if err := v.Set(value); err != nil {
		panic(err)
	}
	fs.Var(v, name, usage+" (a `time`: a duration ago, 24h or 7d, or RFC 3339)")
	return v
}

func (v *timeValue) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

func (v *timeValue) Set(s string) error {
	v.text = s
	if s == "" {
		v.at = time.Time{}
		return nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		v.at = t
		return nil
	}
	d, err := ops.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither a duration ago (24h, 7d) nor an RFC 3339 time", s)
	}
	v.at = v.now().Add(-d)
	return nil
}
