/*
 * Two builds of libwaitprep.so against each other, in one process: the C pin + unpin of one READY
 * slot (hit) and a pin of an absent digest among 200 neighbours (miss), each build's handle opened
 * as the Node addon opens it for the second (WP_OPEN_SINGLE_THREAD) and default for the first,
 * alternating rounds so that the VM's drift and its fast/slow modes hit both alike; thread CPU
 * time, median of 21 rounds. A benchmark, never a test. Written for the question "did
 * the wake path get slower", where whole bench:pin runs on this VM spread too much to answer.
 *
 *   gcc -O2 bench/native/lib-ab.c -o /tmp/lib-ab -ldl
 *   /tmp/lib-ab OLD/build/Release/libwaitprep.so NEW/build/Release/libwaitprep.so [iterations]
 *
 * OLD is usually a /tmp clone at an earlier commit (npm install there builds it). The two tables
 * are separate, so builds of different ABI versions compare fine. The structs below mirror the
 * C ABI's (waitprep.h) without including it, since the two builds' headers may differ.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
typedef struct { uint64_t a,b,c; uint32_t d,e; } meta_t;
typedef struct { uint32_t slot; uint64_t generation; meta_t meta; uint64_t token; } lease_t;
typedef struct { uint32_t slot; uint64_t generation; } res_t;
typedef struct { uint32_t cap, mode, flags, uid; } opts_t;
typedef struct { void *h; int (*open_ex)(const char*,int,const opts_t*,void**); int (*pin)(void*,const uint8_t*,const void*,lease_t*);
  int (*unpin)(void*,const lease_t*); int (*reserve)(void*,const uint8_t*,res_t*); int (*publish)(void*,const res_t*,const meta_t*);
  int (*unlink)(const char*); void (*close)(void*); void *p, *c; } lib_t;
static double now(void){ struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec*1e9+t.tv_nsec; }
static void load(lib_t *l, const char *path, const char *name, uint32_t flags){
  l->h = dlopen(path, RTLD_NOW|RTLD_LOCAL); if(!l->h){fprintf(stderr,"%s\n",dlerror()); exit(1);}
  l->open_ex=dlsym(l->h,"wp_open_ex"); l->pin=dlsym(l->h,"wp_try_pin"); l->unpin=dlsym(l->h,"wp_unpin");
  l->reserve=dlsym(l->h,"wp_reserve"); l->publish=dlsym(l->h,"wp_publish"); l->unlink=dlsym(l->h,"wp_unlink"); l->close=dlsym(l->h,"wp_close");
  opts_t create={1024,0600,0,0}, open={0,0,flags,0};
  if (l->open_ex(name,1,&create,&l->p) || l->open_ex(name,0,&open,&l->c)) { fprintf(stderr,"open failed\n"); exit(1);}
  uint8_t d[32]; memset(d,7,32); res_t r; l->reserve(l->p,d,&r); meta_t m={1,2,3,4,5}; l->publish(l->p,&r,&m);
  /* neighbours so a miss compares digests */
  for (int k=0;k<200;k++){ uint8_t e[32]; memset(e,k+9,32); e[0]=7; if(!l->reserve(l->p,e,&r)) l->publish(l->p,&r,&m); }
}
static double hit(lib_t *l, int n){ uint8_t d[32]; memset(d,7,32); lease_t x; double t=now(); for(int i=0;i<n;i++){ if(l->pin(l->c,d,NULL,&x)==0) l->unpin(l->c,&x);} return (now()-t)/n; }
static double miss(lib_t *l, int n){ uint8_t d[32]; memset(d,7,32); d[31]=1; lease_t x; double t=now(); for(int i=0;i<n;i++) l->pin(l->c,d,NULL,&x); return (now()-t)/n; }
static int cmp(const void*a,const void*b){ double x=*(double*)a,y=*(double*)b; return (x>y)-(x<y);}
int main(int argc,char**argv){
  if (argc < 3) { fprintf(stderr, "usage: lib-ab OLD.so NEW.so [iterations]\n"); return 2; }
  lib_t o,m; char n1[64],n2[64]; snprintf(n1,64,"ab-old-%d",getpid()); snprintf(n2,64,"ab-new-%d",getpid());
  load(&o,argv[1],n1,0); load(&m,argv[2],n2,1 /* single thread, as the addon opens */);
  int n = argc > 3 ? atoi(argv[3]) : 1000000;
  if (n < 1) { fprintf(stderr, "iterations: a positive integer\n"); return 2; }
  enum{R=21}; double oh[R],mh[R],om[R],mm[R];
  for(int r=0;r<R;r++){ oh[r]=hit(&o,n); mh[r]=hit(&m,n); om[r]=miss(&o,n); mm[r]=miss(&m,n); }
  qsort(oh,R,8,cmp);qsort(mh,R,8,cmp);qsort(om,R,8,cmp);qsort(mm,R,8,cmp);
  printf("C, thread CPU ns, median of %d alternating rounds: hit old %.1f new %.1f (x%.2f); miss old %.1f new %.1f (x%.2f)\n",R,oh[R/2],mh[R/2],mh[R/2]/oh[R/2],om[R/2],mm[R/2],mm[R/2]/om[R/2]);
  o.close(o.c);o.close(o.p);o.unlink(n1); m.close(m.c);m.close(m.p);m.unlink(n2); return 0; }
