// Package snippets holds the documentation's Go code blocks as code that
// compiles.
//
// Each ```go block of README.md and of docs/*.md is the text between a
// "// readme:begin NAME" and a "// readme:end" comment in one of this
// package's files, less the function's indentation; quickstart/main.go is
// the README's inbox quick start whole, a program of its own.
// TestDocSnippets fails when a page's block and its region differ, or when
// a region is in no block, so the documentation cannot drift from code that
// compiles; TestQuickStart builds the quick start in a fresh module and
// runs it against an empty test database; TestDocLinks checks that every
// relative link and anchor of those pages leads somewhere. To change a
// block, change its region here and copy it into the page (the test's
// failure shows the first line that differs).
//
// The functions are never called: they exist to be compiled and vetted.
package snippets
