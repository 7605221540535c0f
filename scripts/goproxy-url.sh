#!/usr/bin/env bash
# Prints the Go module proxy to download a Go toolchain from: the first
# proxy of $GOPROXY, skipping "direct" (which fetches modules from their
# repositories, where no toolchain lives) and stopping at "off". Without one
# it prints nothing, says why on stderr and exits 1: this repository names
# no registry address of its own.
set -euo pipefail
IFS=',|' read -r -a entries <<<"${GOPROXY:-}"
for entry in "${entries[@]}"; do
	case "$entry" in
	off) break ;;
	direct | "") ;;
	*://*)
		echo "${entry%/}"
		exit 0
		;;
	*)
		echo "https://${entry%/}"
		exit 0
		;;
	esac
done
echo "goproxy-url: \$GOPROXY names no module proxy (it is ${GOPROXY:-unset}); set it to one (GOPROXY=https://proxy.example.com) to download Go, or install Go 1.21 or later" >&2
exit 1
