"""`moetools host`: the machine it runs on as a host profile (formats/host_profile.py): its GPUs with
their memory, bandwidth and PCIe link, its CPU and the threads llama.cpp would use, its RAM with a
measured read rate and, when asked, a drive's measured read rate. device-fit --host plans for the
machine a profile describes, wherever it runs.

cpu.py and gpus.py read the machine (sysfs, /proc, nvidia-smi/rocm-smi through devicefit.devices);
measure.py times RAM and drive reads; probe.py puts the profile together; command.py is the click command.
"""
