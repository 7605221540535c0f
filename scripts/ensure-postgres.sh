#!/usr/bin/env bash
# Prints a DATABASE_URL for a reachable PostgreSQL server, starting one when
# needed. Everything it does is reported on stderr; stdout is only the URL.
#
# Order of attempts:
#   1. $DATABASE_URL, when set: used when it answers, else the script fails
#      saying what it tried (it never falls back to another server);
#   2. the local server on 127.0.0.1:5432 (user postgres, trust auth);
#   3. an existing Debian cluster, started with pg_ctlcluster;
#   4. the Debian postgresql package, installed when no server binaries exist;
#   5. a throwaway cluster from the server binaries under $WHARF_PG_DIR
#      (default /tmp/wharf-pg) on port $WHARF_PG_PORT (default 54329).
#
# With WHARF_DB_NAME set, a server this script found or started (not a
# DATABASE_URL you gave it) gets that database, created when missing, and the
# printed URL points at it.
set -euo pipefail

say() { printf 'ensure-postgres: %s\n' "$*" >&2; }

reachable() {
	# pg_isready only needs libpq; psql confirms that we can log in.
	if command -v psql >/dev/null 2>&1; then
		PGCONNECT_TIMEOUT=3 psql "$1" -Atqc 'SELECT 1' >/dev/null 2>&1
	elif command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -d "$1" -t 3
	else
		return 1
	fi
}

wait_reachable() {
	for _ in $(seq 1 60); do
		reachable "$1" && return 0
		sleep 0.5
	done
	return 1
}

local_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

# use_url prints a URL of a server we found or started, switched to
# $WHARF_DB_NAME when that is set.
use_url() {
	local url=$1 db=${WHARF_DB_NAME:-}
	if [ -n "$db" ]; then
		case "$db" in
		*[!a-z0-9_]* | [!a-z_]*) say "WHARF_DB_NAME must be a lower-case identifier: $db"; exit 1 ;;
		esac
		if [ "$(psql "$url" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
			say "creating database $db"
			psql "$url" -qc "CREATE DATABASE \"$db\"" >&2
		fi
		url=$(printf '%s' "$url" | sed -E "s#^(postgres(ql)?://[^/]*)/[^?]*#\1/$db#")
	fi
	echo "$url"
}

# mask prints a URL with its password replaced by xxxxx.
mask() { printf '%s' "$1" | sed -E 's#^([a-z]+://[^:/@]*):[^@]*@#\1:xxxxx@#'; }

if [ -n "${DATABASE_URL:-}" ]; then
	# A DATABASE_URL you set is the server you meant: it is used or the
	# command fails, never silently replaced by another server.
	if reachable "$DATABASE_URL"; then
		say "using DATABASE_URL from the environment"
		echo "$DATABASE_URL"
		exit 0
	fi
	why=""
	if command -v psql >/dev/null 2>&1; then
		why=$(PGCONNECT_TIMEOUT=3 psql "$DATABASE_URL" -Atqc 'SELECT 1' 2>&1 >/dev/null | head -n 3 || true)
	else
		why="neither psql nor pg_isready is installed to check it (apt-get install postgresql-client)"
	fi
	say "DATABASE_URL is set but does not answer: $(mask "$DATABASE_URL")"
	[ -n "$why" ] && say "tried: SELECT 1 through psql: $why"
	say "fix: start that server (e.g. pg_ctlcluster --skip-systemctl-redirect 15 main start), correct DATABASE_URL, or unset it to let this script find or start a local server"
	exit 1
fi

if reachable "$local_url"; then
	say "using the local server on 127.0.0.1:5432"
	use_url "$local_url"
	exit 0
fi

as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

if command -v pg_lsclusters >/dev/null 2>&1; then
	cluster=$(pg_lsclusters -h 2>/dev/null | awk '$3 == 5432 {print $1" "$2; exit}')
	if [ -n "$cluster" ]; then
		say "starting Debian cluster $cluster with pg_ctlcluster"
		# shellcheck disable=SC2086
		pg_ctlcluster --skip-systemctl-redirect $cluster start >&2 || true
		if wait_reachable "$local_url"; then
			use_url "$local_url"
			exit 0
		fi
		say "cluster $cluster did not become reachable"
	fi
fi

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ]; then
	if [ "$(id -u)" != 0 ]; then
		say "no PostgreSQL server binaries and not root: install postgresql (apt-get install postgresql) or set DATABASE_URL"
		exit 1
	fi
	say "installing PostgreSQL from Debian's packages (apt-get install postgresql)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq postgresql >&2
	bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	cluster=$(pg_lsclusters -h 2>/dev/null | awk '$3 == 5432 {print $1" "$2; exit}')
	if [ -n "$cluster" ]; then
		# Debian's new cluster asks for passwords over TCP. This cluster was
		# installed just now, for development or CI: trust loopback, as the
		# tests' local server does, before starting it.
		hba=$(ls /etc/postgresql/*/main/pg_hba.conf | head -n 1)
		if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
			say "trusting loopback connections in $hba (a freshly installed development cluster)"
			sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
		fi
		say "starting the new cluster $cluster"
		# shellcheck disable=SC2086
		pg_ctlcluster --skip-systemctl-redirect $cluster restart >&2 || true
		if wait_reachable "$local_url"; then
			use_url "$local_url"
			exit 0
		fi
		say "the new cluster $cluster did not become reachable; trying a throwaway cluster"
	fi
fi

dir=${WHARF_PG_DIR:-/tmp/wharf-pg}
port=${WHARF_PG_PORT:-54329}
url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
if reachable "$url"; then
	say "using the throwaway cluster in $dir on port $port"
	use_url "$url"
	exit 0
fi
if [ ! -f "$dir/PG_VERSION" ]; then
	say "creating a throwaway cluster in $dir with $bindir/initdb"
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
	as_postgres "$bindir/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >/dev/null
fi
say "starting the throwaway cluster on 127.0.0.1:$port (stop it with: $bindir/pg_ctl -D $dir stop)"
as_postgres "$bindir/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
	-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >&2
if wait_reachable "$url"; then
	use_url "$url"
	exit 0
fi
say "could not start PostgreSQL; see $dir/server.log"
exit 1
