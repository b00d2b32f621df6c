#!/bin/sh
# The sync role's run lock on the controller: a directory made with mkdir (atomic), holding an `owner` file
# (host, pid of the ansible-playbook that holds it, time). Used by roles/sync/tasks/lock.yml and unlock.yml.
#
#   sync_lock.sh acquire LOCK_DIR HOST PID STALE_MINUTES
#   sync_lock.sh release LOCK_DIR HOST PID
#
# acquire prints `acquired`, `held` (this very ansible-playbook already holds it) or `took-over <owner>` (a
# lock of this host whose pid is gone and which is older than STALE_MINUTES), and exits 3 naming the holder
# when someone else holds it. release removes the lock only when HOST and PID own it, and prints `released`
# or `not-owner <owner>`.
set -eu

action=$1
lock=$2
host=$3
pid=$4

owner_line() {
    # One line naming a lock's owner, from its owner file (empty fields when it is still being written).
    o_host=$(sed -n 's/^host=//p' "$1/owner" 2>/dev/null || true)
    o_pid=$(sed -n 's/^pid=//p' "$1/owner" 2>/dev/null || true)
    o_time=$(sed -n 's/^time=//p' "$1/owner" 2>/dev/null || true)
    o_since=$(sed -n 's/^since=//p' "$1/owner" 2>/dev/null || true)
}

write_owner() {
    now=$(date +%s)
    printf 'host=%s\npid=%s\ntime=%s\nsince=%s\n' "$host" "$pid" "$now" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        > "$lock/owner.tmp"
    mv "$lock/owner.tmp" "$lock/owner"
}

case $action in
acquire)
    stale_minutes=$5
    mkdir -p "$(dirname "$lock")"
    if mkdir "$lock" 2>/dev/null; then
        write_owner
        echo acquired
        exit 0
    fi
    owner_line "$lock"
    holder="host=${o_host:-?} pid=${o_pid:-?} since=${o_since:-?}"
    if [ "$o_host" = "$host" ] && [ "$o_pid" = "$pid" ]; then
        echo held
        exit 0
    fi
    now=$(date +%s)
    case $o_time in
    '' | *[!0-9]*) age=0 ;;
    *) age=$((now - o_time)) ;;
    esac
    if [ "$o_host" = "$host" ] && [ -n "$o_pid" ] && [ ! -d "/proc/$o_pid" ] \
        && [ "$age" -ge $((stale_minutes * 60)) ]; then
        # Moved aside, not removed in place: a second controller taking over at the same moment finds the
        # name gone (its mv fails) and then meets our fresh lock in its mkdir.
        aside="$lock.stale-$now-$pid"
        if mv "$lock" "$aside" 2>/dev/null && mkdir "$lock" 2>/dev/null; then
            write_owner
            rm -rf "$aside"
            echo "took-over $holder"
            exit 0
        fi
    fi
    echo "run directory locked by another sync: $lock holds $holder (age ${age}s)" >&2
    exit 3
    ;;
release)
    owner_line "$lock"
    if [ ! -d "$lock" ]; then
        echo absent
    elif [ "$o_host" = "$host" ] && [ "$o_pid" = "$pid" ]; then
        rm -f "$lock/owner"
        rmdir "$lock"
        echo released
    else
        echo "not-owner host=${o_host:-?} pid=${o_pid:-?} since=${o_since:-?}"
    fi
    ;;
*)
    echo "usage: $0 acquire|release LOCK_DIR HOST PID [STALE_MINUTES]" >&2
    exit 2
    ;;
esac
