// Package compat holds what the Go compatibility clients share: the command line every client
// of tests/compat takes, the records they produce and the JSON line they print.
package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Record is one record as a client saw it: produced (its acknowledged partition and offset) or
// consumed.
type Record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

// Padding makes values compress well, so that clients that skip a codec when it does not pay
// (franz-go) still use it.
var Padding = strings.Repeat("x", 100)

// Key and Value are the contents of the i-th record a produce operation writes (run.py
// expects exactly these).
func Key(prefix string, i int) string   { return fmt.Sprintf("%s-%d", prefix, i) }
func Value(prefix string, i int) string { return fmt.Sprintf("value %d of %s ", i, prefix) + Padding }

// ConsumeTimeout bounds a consume operation: it prints what it read by then.
const ConsumeTimeout = 40 * time.Second

// Emit prints v as the operation's one JSON line and exits 0.
func Emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		Fail(err)
	}
	fmt.Println(string(line))
	os.Exit(0)
}

// Fail prints the error as the JSON line and on stderr, and exits 1.
func Fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	line, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(line))
	os.Exit(1)
}

// Check fails on a non-nil error, naming what was being done.
func Check(err error, doing string) {
	if err != nil {
		Fail(fmt.Errorf("%s: %w", doing, err))
	}
}

// Int parses a numeric argument.
func Int(s string) int {
	n, err := strconv.Atoi(s)
	Check(err, "argument "+s)
	return n
}

// Command is the operation and its arguments, as run.py passes them:
//
//	create BOOTSTRAP TOPIC PARTITIONS
//	produce BOOTSTRAP TOPIC CODEC COUNT PREFIX
//	consume BOOTSTRAP TOPIC GROUP COUNT
//	committed BOOTSTRAP TOPIC GROUP
//	offsets BOOTSTRAP TOPIC
//	version (the client library's version)
type Command struct {
	Op, Bootstrap, Topic string
	Args                 []string
}

// Parse reads a Command from positional arguments.
func Parse(args []string) Command {
	if len(args) == 1 && args[0] == "version" {
		return Command{Op: "version"}
	}
	want := map[string]int{"create": 1, "produce": 3, "consume": 2, "committed": 1, "offsets": 0}
	if len(args) < 3 {
		Fail(fmt.Errorf("usage: OP BOOTSTRAP TOPIC ARGS..., got %q", args))
	}
	n, ok := want[args[0]]
	if !ok || len(args) != 3+n {
		Fail(fmt.Errorf("unknown operation or wrong arguments: %q", args))
	}
	return Command{Op: args[0], Bootstrap: args[1], Topic: args[2], Args: args[3:]}
}

// ModuleVersion is the version of module path built into this program.
func ModuleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}

// Offsets is what the offsets operation prints: earliest and latest offset per partition.
type Offsets struct {
	Earliest map[int32]int64 `json:"earliest"`
	Latest   map[int32]int64 `json:"latest"`
}
