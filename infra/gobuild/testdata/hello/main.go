// Command hello prints a fixed line: the package gobuild's tests build it.
package main

import "fmt"

func main() { fmt.Println("hello from a bounded build") }
