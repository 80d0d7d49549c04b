//go:build !crashpoints

package crashpoint

// Enabled tells whether the binary was built with -tags crashpoints.
const Enabled = false

// Hit does nothing in a binary built without -tags crashpoints.
func Hit(name string) {}
