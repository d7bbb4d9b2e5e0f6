# shellcheck shell=bash
# Source with one argument, a folder: `source scripts/device_mpi_env.sh /tmp/mpiroot`. For GPU machines
# without MPI: unpacks the Open MPI that scripts/fetch_device_deps.sh put in .deps/mpi-debs into that folder
# (once) and points PATH, the loader, Open MPI and PMIx at it; TB_MPI_CMAKE_ARGS makes CMake's
# find_package(MPI) use it. Runs as root with shared memory only, oversubscribing the cores.
tb_mpi_root=$(mkdir -p "${1:?usage: source device_mpi_env.sh UNPACK_ROOT}" && cd "$1" && pwd) || return 1
tb_mpi_debs=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deps/mpi-debs
if [ ! -x "$tb_mpi_root/usr/bin/orterun" ]; then
  for d in "$tb_mpi_debs"/*.deb; do dpkg -x "$d" "$tb_mpi_root" || return 1; done
  # What dpkg's maintainer scripts would have made: update-alternatives' links.
  ln -sf ../libpsm1/libpsm_infinipath.so.1.16 "$tb_mpi_root/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
  for n in mpirun mpiexec mpicc mpicxx mpic++; do ln -sf "$n.openmpi" "$tb_mpi_root/usr/bin/$n"; done
fi
tb_mpi_lib=$tb_mpi_root/usr/lib/x86_64-linux-gnu
export PATH=$tb_mpi_root/usr/bin:$PATH
# ucx/: for the UCX modules, whose RUNPATH names /usr (UCX is not used with the settings below).
export LD_LIBRARY_PATH=$tb_mpi_lib:$tb_mpi_root/lib/x86_64-linux-gnu:$tb_mpi_lib/openmpi/lib:$tb_mpi_lib/ucx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$tb_mpi_root/usr OPAL_SYSCONFDIR=$tb_mpi_root/etc/openmpi
export PMIX_PREFIX=$tb_mpi_lib/pmix2 PMIX_MCA_mca_base_component_path=$tb_mpi_lib/pmix2/lib/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_rmaps_base_oversubscribe=1
export TB_MPI_CMAKE_ARGS="-DMPI_C_COMPILER=$tb_mpi_root/usr/bin/mpicc -DMPI_CXX_COMPILER=$tb_mpi_root/usr/bin/mpicxx"
unset tb_mpi_debs tb_mpi_lib
