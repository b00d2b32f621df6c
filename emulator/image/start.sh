#!/usr/bin/env bash
# Entry point of the local pod image, modelled on RunPod's images:
# register PUBLIC_KEY for root, start sshd, then stay alive.
# The container's env (RUNPOD_*, user env) belongs to this process only: nothing
# here copies it to /etc/environment, so SSH sessions do not see it, as on RunPod.
set -eu

if [ -n "${PUBLIC_KEY:-}" ]; then
    install -d -m 700 /root/.ssh
    printf '%s\n' "$PUBLIC_KEY" >> /root/.ssh/authorized_keys
    chmod 600 /root/.ssh/authorized_keys
    # Host keys are made per container, never baked into the image.
    ssh-keygen -A >/dev/null
    install -d -m 755 /run/sshd
    /usr/sbin/sshd -E /var/log/sshd.log
fi

trap 'exit 0' TERM INT
sleep infinity &
wait $!
