package main

import (
	"errors"
	"strings"
	"unicode"
)

// checkName checks the value of a name flag (--pipeline): a key of every
// table, a metric label and a word of log lines, which a person types again
// and must see as it is. It returns an error saying what is wrong when s is
// empty, only white space, starts or ends with white space, or holds a
// control character (unicode.IsControl: C0, DEL, C1). Inner spaces and any
// other letters are fine.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case strings.TrimSpace(s) == "":
		return errors.New("is blank: give a name")
	case strings.TrimSpace(s) != s:
		return errors.New("starts or ends with white space")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return errors.New("holds a control character")
	}
	return nil
}
