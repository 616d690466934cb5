#!/usr/bin/env bash
# Sourced before a vLLM build: when the CUDA toolkit lacks what vLLM's CMake links or
# includes (cusparse.h and friends, libnvrtc.so, the libcuda.so stub) but the pip wheels
# torch depends on carry them (nvidia/cu13), make /tmp/cudaroot, a toolkit view of both,
# and point CUDA_HOME, CUDA_TOOLKIT_ROOT_DIR, PATH and CPATH at it.  Prints what it did.
CU=${CUDA_HOME:-/usr/local/cuda}
NV=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null)
missing=""
[ -f $CU/include/cusparse.h ] || missing="$missing cusparse.h"
ls $CU/lib64/libnvrtc.so >/dev/null 2>&1 || missing="$missing libnvrtc.so"
[ -f $CU/lib64/stubs/libcuda.so ] || missing="$missing stubs/libcuda.so"
if [ -n "$missing" ] && [ -d "$NV" ]; then
  R=/tmp/cudaroot; rm -rf $R; mkdir -p $R/lib64/stubs $R/include
  for d in $CU/*; do n=$(basename $d); case $n in lib64|include) ;; *) ln -s $d $R/$n;; esac; done
  for f in $CU/include/* $NV/include/*; do [ -e $R/include/$(basename $f) ] || ln -s $f $R/include/; done
  for f in $CU/lib64/*; do [ "$(basename $f)" = stubs ] || ln -s $f $R/lib64/; done
  for f in $NV/lib/*.so*; do b=$(basename $f); s=${b%%.so*}.so
    [ -e $R/lib64/$b ] || ln -s $f $R/lib64/$b; [ -e $R/lib64/$s ] || ln -s $f $R/lib64/$s; done
  driver=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -f $CU/lib64/stubs/libcuda.so ]; then ln -s $CU/lib64/stubs/libcuda.so $R/lib64/stubs/
  elif [ -n "$driver" ]; then ln -s $driver $R/lib64/stubs/libcuda.so
  else echo "" | gcc -shared -x c - -o $R/lib64/stubs/libcuda.so; fi
  export CUDA_HOME=$R CUDA_TOOLKIT_ROOT_DIR=$R PATH=$R/bin:$PATH CPATH=$R/include${CPATH:+:$CPATH}
  echo "cudaroot: $CU lacks$missing; using $R ($CU + $NV)"
else
  echo "cudaroot: $CU is complete${missing:+ (lacks$missing, no nvidia/cu13 to add)}"
fi
