// Package storedjson reads a few fields of an object stored as JSON without
// decoding the rest. Start-up reads every stored namespace, LogicalCluster
// and Workspace to learn a handful of fields each (a UID, a phase, an
// owner), and encoding/json spent most of that time on what it skips: it
// validates the whole value first, then walks it again, managed fields
// included, which are most of the bytes. Here one pass finds the members
// asked for and steps over the others; the caller decodes only those.
//
// Values are what the API server stored. The walk reports malformed input
// as an error: the separators of the objects it walks, and the brackets and
// strings of the values it steps over; it does not check number or literal
// syntax, nor the separators inside values it steps over, which no caller
// reads.
package storedjson

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Members calls fn with the key and the raw value of each member of the
// JSON object data, in order, until fn returns false. A key that holds
// escapes is unescaped. It fails if data is not an object or is malformed.
// key is valid only during the call (compare it as string(key)).
func Members(data []byte, fn func(key []byte, value []byte) bool) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errors.New("storedjson: not an object")
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return trailing(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return syntaxError(data, i, "a member's key")
		}
		end, escaped, err := skipString(data, i)
		if err != nil {
			return err
		}
		key := data[i+1 : end-1]
		if escaped {
			var k string
			if err := json.Unmarshal(data[i:end], &k); err != nil {
				return err
			}
			key = []byte(k)
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return syntaxError(data, i, "':'")
		}
		i = skipSpace(data, i+1)
		start := i
		if i, err = skipValue(data, i); err != nil {
			return err
		}
		if !fn(key, data[start:i]) {
			return nil
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return syntaxError(data, i, "',' or '}'")
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return trailing(data, i+1)
		default:
			return syntaxError(data, i, "',' or '}'")
		}
	}
}

// Object walks the members of a member's raw value as Members does, with
// two differences callers reading nested objects need: null has no members
// (as encoding/json reads it), and fn's first error ends the walk and is
// returned.
func Object(raw []byte, fn func(key, value []byte) error) error {
	if IsNull(raw) {
		return nil
	}
	var failed error
	if err := Members(raw, func(k, v []byte) bool { failed = fn(k, v); return failed == nil }); err != nil {
		return err
	}
	return failed
}

// String returns the string a raw JSON value holds; false if it holds
// something else (null included).
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	end, escaped, err := skipString(raw, 0)
	if err != nil || end != len(raw) {
		return "", false
	}
	if !escaped {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// IsNull says whether a raw JSON value is null (a member set to null reads
// as absent).
func IsNull(raw []byte) bool { return string(raw) == "null" }

func trailing(data []byte, i int) error {
	if i = skipSpace(data, i); i != len(data) {
		return syntaxError(data, i, "the end")
	}
	return nil
}

func syntaxError(data []byte, i int, want string) error {
	if i >= len(data) {
		return fmt.Errorf("storedjson: unexpected end of input, want %s", want)
	}
	return fmt.Errorf("storedjson: unexpected %q at offset %d, want %s", data[i], i, want)
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset after the string starting at data[i] (a
// '"') and whether it holds escapes.
func skipString(data []byte, i int) (int, bool, error) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '"':
			return j + 1, escaped, nil
		case '\\':
			escaped = true
			j++ // the escaped byte (a \u's hex digits are plain bytes)
		}
	}
	return 0, false, syntaxError(data, len(data), "the end of a string")
}

// skipValue returns the offset after the value starting at data[i].
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, syntaxError(data, i, "a value")
	}
	switch data[i] {
	case '"':
		end, _, err := skipString(data, i)
		return end, err
	case '{', '[':
		return skipNested(data, i)
	}
	// A number or a literal: up to the next delimiter.
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return 0, syntaxError(data, i, "a value")
			}
			return j, nil
		case '"', '{', '[', ':':
			return 0, syntaxError(data, j, "a delimiter")
		}
		j++
	}
	if j == i {
		return 0, syntaxError(data, i, "a value")
	}
	return j, nil
}

// skipNested steps over the object or array at data[i], checking that its
// brackets match and its strings end.
func skipNested(data []byte, i int) (int, error) {
	var small [32]byte
	stack := small[:0]
	for j := i; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			end, _, err := skipString(data, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[':
			stack = append(stack, c)
		case '}', ']':
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return 0, syntaxError(data, j, "a matching bracket")
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, syntaxError(data, len(data), "a closing bracket")
}
