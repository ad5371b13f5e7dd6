"""Pi-like devices on this machine: the bridge as aarch64 code under qemu (``arm``) and memory cgroups
with swap at a board's RAM size (``memlimit``). Used by hil.run (--device-arch aarch64), the deployment
study's memory stage and tests/arm; never needed on a real Pi."""
