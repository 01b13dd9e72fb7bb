/* pull-cost: process_vm_readv(2) of this process's own memory against memcpy, 64 KiB to 64 MiB
 * (results/shm-pull-cost/). Build and run: gcc -O2 -o /tmp/pull-cost scripts/probes/pull-cost.c && /tmp/pull-cost */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  size_t sizes[]={64<<10,256<<10,1<<20,4<<20,16<<20,64<<20};
  for(int s=0;s<6;s++){size_t n=sizes[s];char*a=malloc(n),*b=malloc(n);memset(a,1,n);memset(b,2,n);
    int it=(int)(((size_t)1<<30)/n); if(it>2000)it=2000; if(it<5)it=5;
    double t0=now();for(int i=0;i<it;i++){memcpy(b,a,n);__asm__ volatile(""::"r"(b):"memory");}double m=(now()-t0)/it;
    struct iovec l={b,n},r={a,n};pid_t p=getpid();
    t0=now();for(int i=0;i<it;i++){if(process_vm_readv(p,&l,1,&r,1,0)!=(ssize_t)n){perror("pvr");return 1;}}double c=(now()-t0)/it;
    printf("%8zu KiB memcpy %8.1f us (%5.1f GB/s)  process_vm_readv %8.1f us (%5.1f GB/s) ratio %.2f\n",n>>10,m*1e6,n/m/1e9,c*1e6,n/c/1e9,c/m);
    free(a);free(b);}
}
