/* SPDX-License-Identifier: Apache-2.0 */
/* unit_cli_shape.c — the SHAPE grammar (tools/cli_shape.c) carries the whole problem: every word
 * round-trips through the canonical text, each rule (a word twice, two words for one aspect, a
 * parameter without its divergence, a divergence without its parameter, a word without its
 * partner) is a usage error naming the word, in every command and in a --file, the old options
 * still work, and `kljit demo` prints every field of kljit_problem. Needs no GPU.
 *
 * The grammar is linked in (tools/cli_shape.c, tools/cli_args.c) for the round trips; the rules
 * are checked through the built `kljit` (KLJIT_CLI), as scripts meet them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/cli.h"
#include "cli_run.h"
#include "harness.h"


/* cli_problem_print of a problem into buf. */
static void print_problem(const kljit_problem *pb, long long rows, char *buf, size_t cap) {
  FILE *const f = fmemopen(buf, cap, "w");
  if (!f) {
    buf[0] = '\0';
    return;
  }
  cli_problem_print(f, pb, rows);
  fclose(f);
}

/* Shapes that between them use every word of the grammar. */
static const char *const SHAPES[] = {
    "V=128256,H=4096",
    "V=32000,H=2048,N=8192,fp16,logits,tt=2,T=0.5,tcap=50,cap=30,t2,reduction=sum",
    "V=50257,H=768,fp32,logprobs,div=reverse,hard=0.25,soft=0.75,labels=i32,ignore=-1",
    "V=4096,H=64,topk=100,values=logprobs,tail=bucket,ids=i32,tdt=bf16,div=jsd,beta=0.4",
    "V=4096,H=64,topk=8,tail=renorm,fp16,eps=1e-12,runtime,bias,native,tf32,check",
    "V=1000,H=64,hidden=48,tbias,tv=1024,div=jsd,beta=0.5,gw=bf16,accum=out,reduction=mean",
    "V=1000,H=64,probs,tv=1000,tld=1024,bias,gw=bf16,accum=auto,N=77",
    "V=500,H=64,vtot=1000,voff=500,shards=2,div=reverse",
    "V=1000,H=64,dense,div=forward,tdt=fp32,tf32",
    "V=1000,H=64,logits,div=skew-reverse,alpha=0.3,hard=0.5,ls=0.1,zloss=0.0001,roww,check",
    "V=1000,H=64,div=tvd,roww",
    "V=1000,H=64,div=skew-forward,alpha=0.25,hard=1,zloss=0.001",
    "V=4096,H=64,topk=16,tail=renorm,div=skew-forward,alpha=0.2,roww",
    "V=4096,H=64,topk=32,tail=bucket,values=logprobs,div=skew-reverse,alpha=0.7,hard=0.5",
    "V=4096,H=64,topk=8,hard=0.5,ls=0.1,zloss=0.001",
    "V=128256,H=4096,N=8192,precise",
    "V=4096,H=64,topk=8,T=0.5,precise,roww,check",
};

static int every_word_round_trips_through_the_canonical_shape(void) {
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
    cli_parser p;
    char *argv[] = {"test", NULL};
    cli_parser_init(&p, 1, argv);
    static cli_shape a, b;
    TH_CHECK(cli_shape_parse(&p, SHAPES[i], NULL, NULL, &a));
    char text[CLI_SHAPE_TEXT], again[CLI_SHAPE_TEXT];
    cli_shape_format(&a.pb, a.rows, text, sizeof text);
    TH_CHECK(cli_shape_parse(&p, text, NULL, NULL, &b));
    cli_shape_format(&b.pb, b.rows, again, sizeof again);
    static char fa[4096], fb[4096];
    print_problem(&a.pb, a.rows, fa, sizeof fa);
    print_problem(&b.pb, b.rows, fb, sizeof fb);
    printf("%s\n  -> %s\n", SHAPES[i], text);
    TH_CHECK(strcmp(text, again) == 0 && a.rows == b.rows);
    TH_CHECK(strcmp(fa, fb) == 0); /* every field, as the demo prints it */
  }
  /* what the words set, field by field, for two of them */
  cli_parser p;
  char *argv[] = {"test", NULL};
  cli_parser_init(&p, 1, argv);
  static cli_shape s;
  TH_CHECK(cli_shape_parse(&p, SHAPES[5], NULL, NULL, &s));
  TH_CHECK(s.pb.teacher == KLJIT_TEACHER_DENSE_HIDDEN && s.pb.teacher_hidden == 48);
  TH_CHECK((s.pb.flags & KLJIT_FLAG_TEACHER_BIAS) && s.pb.teacher_vocab == 1024);
  TH_CHECK(s.pb.divergence == KLJIT_DIVERGENCE_JSD && s.pb.beta == 0.5);
  TH_CHECK(s.pb.grad_weight_accum == KLJIT_ACCUM_OUTPUT_DTYPE);
  TH_CHECK(cli_shape_parse(&p, SHAPES[2], NULL, NULL, &s));
  TH_CHECK(s.pb.hard_weight == 0.25 && s.pb.soft_weight == 0.75);
  TH_CHECK(s.pb.label_dtype == KLJIT_INT32 && s.pb.ignore_index == -1);
  TH_CHECK(s.pb.divergence == KLJIT_DIVERGENCE_REVERSE_KL);
  TH_CHECK(cli_shape_parse(&p, SHAPES[9], NULL, NULL, &s));
  TH_CHECK(s.pb.divergence == KLJIT_DIVERGENCE_SKEW_REVERSE_KL && s.pb.skew_alpha == 0.3);
  TH_CHECK(s.pb.label_smoothing == 0.1 && s.pb.z_loss == 1e-4 && s.pb.hard_weight == 0.5);
  TH_CHECK(s.pb.flags == (KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_CHECK_INPUTS));
  TH_CHECK(cli_shape_parse(&p, SHAPES[10], NULL, NULL, &s));
  TH_CHECK(s.pb.divergence == KLJIT_DIVERGENCE_TVD);
  TH_CHECK(cli_shape_parse(&p, SHAPES[12], NULL, NULL, &s)); /* the top-K skew KLs */
  TH_CHECK(s.pb.teacher == KLJIT_TEACHER_SPARSE_TOPK && s.pb.tail == KLJIT_TAIL_RENORM);
  TH_CHECK(s.pb.divergence == KLJIT_DIVERGENCE_SKEW_FORWARD_KL && s.pb.skew_alpha == 0.2);
  TH_CHECK(cli_shape_parse(&p, SHAPES[14], NULL, NULL, &s)); /* the top-K teacher's CE extras */
  TH_CHECK(s.pb.teacher == KLJIT_TEACHER_SPARSE_TOPK && s.pb.tail == KLJIT_TAIL_NONE);
  TH_CHECK(s.pb.label_smoothing == 0.1 && s.pb.z_loss == 1e-3 && s.pb.hard_weight == 0.5);
  return TH_PASS;
}

/* Each rule, as every command meets it: exit 2 and a message naming the word. */
static int each_rule_is_a_usage_error_naming_the_word(void) {
  static const struct {
    const char *shape, *says;
  } bad[] = {
      {"V=1000,H=64,div=jsd", "'div=jsd' needs its parameter: add beta="},
      {"V=1000,H=64,beta=0.5", "'beta=0.5' is the parameter of div=jsd"},
      {"V=1000,H=64,div=reverse,beta=0.5", "'beta=0.5' is the parameter of div=jsd"},
      {"V=1000,H=64,bf16,bf16", "'bf16' is given twice"},
      {"V=1000,H=64,fp16,bf16", "'fp16' and 'bf16' contradict: both set the dtype"},
      {"V=1000,H=64,probs,logits", "'probs' and 'logits' contradict: both set the teacher form"},
      {"V=1000,H=64,topk=8,hidden=32", "'topk=8' and 'hidden=32' contradict"},
      {"V=1000,H=64,T=1,T=2", "'T=1' and 'T=2' contradict: both set the temperature"},
      {"V=1000,V=2000,H=64", "both set the vocabulary size"},
      {"V=1000,H=64,div=jsd,beta=0.1,div=reverse", "both set the divergence"},
      {"V=1000,H=64,tail=bucket", "'tail=bucket' is for the top-K teacher"},
      {"V=1000,H=64,values=logprobs", "'values=logprobs' is for the top-K teacher"},
      {"V=1000,H=64,tbias", "'tbias' is the online teacher's bias"},
      {"V=1000,H=64,tt=2", "'tt=2' is a logits teacher's temperature"},
      {"V=1000,H=64,tcap=30", "'tcap=30' caps a logits teacher"},
      {"V=1000,H=64,topk=8,tv=2000", "'tv=2000' pads a dense teacher"},
      {"V=1000,H=64,hidden=32,tld=1024", "'tld=1024' is a dense teacher array's row stride"},
      {"V=1000,H=64,div=kl", "div=kl: want forward, reverse, jsd, tvd, skew-forward or"},
      {"V=1000,H=64,div=skew-reverse", "'div=skew-reverse' needs its parameter: add alpha="},
      {"V=1000,H=64,div=jsd,beta=0.5,alpha=0.1", "'alpha=0.1' is the parameter of the skew KLs"},
      {"V=1000,H=64,div=skew-forward,alpha=1", "alpha=1: want a number in [0, 1)"},
      {"V=1000,H=64,ls=0.1", "'ls=0.1' is a term of the hard-label CE: add hard=W"},
      {"V=1000,H=64,hard=1,zloss=2e6", "zloss=2e6: want a number from 0 to 1e+06"},
      {"V=1000,H=64,roww,roww", "'roww' is given twice"},
      {"V=1000,H=64,precise,precise", "'precise' is given twice"},
      {"V=1000,H=64,topk=8,div=skew-forward,alpha=0.2", "TAIL_NONE takes the forward KL only"},
      {"V=1000,H=64,hidden=0", "hidden=0: want an integer from 1 to 1048576"},
      {"V=1000,H=64,beta=2,div=jsd", "beta=2: want a number from 0 to 1"},
      {"V=1000,H=64,eps=0.01", "eps=0.01: want a number in [1e-30, 1e-3)"},
      {"V=1000,H=64,hard=0,soft=0", "hard_weight = soft_weight = 0"}, /* the library's */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    TH_CHECK(cli("precompile --dry-run --cache-dir /nonexistent-kljit %s", bad[i].shape) == 2);
    TH_CHECK(strstr(out, bad[i].says) != NULL);
    TH_CHECK(cli("tune %s", bad[i].shape) == 2 && strstr(out, bad[i].says));
    TH_CHECK(cli("demo %s", bad[i].shape) == 2 && strstr(out, bad[i].says));
  }
  return TH_PASS;
}

static int file_in(const char *dir) {
  char path[PATH_MAX];
  th_path_in(path, dir, "shapes.txt");
  FILE *f = fopen(path, "w");
  TH_CHECK(f);
  fputs("# two good lines, then a divergence without its parameter\n"
        "V=1000,H=64,div=jsd,beta=0.5\nV=1000,H=64,hidden=32,tbias\n"
        "V=1000,H=64,div=jsd   # no beta\n",
        f);
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("precompile --dry-run --cache-dir '%s' --file '%s'", dir, path) == 2);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "%s:4: shape 'V=1000,H=64,div=jsd': 'div=jsd' needs", path);
  TH_CHECK(strstr(out, want));
  TH_CHECK(cli("tune --file '%s'", path) == 2 && strstr(out, want));
  /* the options' words apply to every line: one that sets the same aspect contradicts */
  f = fopen(path, "w");
  TH_CHECK(f);
  fputs("V=1000,H=64\nV=1000,H=64,div=reverse\n", f);
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("precompile --dry-run --cache-dir '%s' --file '%s' --divergence jsd --beta 0.5",
               dir, path) == 2);
  snprintf(want, sizeof want, "%s:2:", path);
  TH_CHECK(strstr(out, want) && strstr(out, "'div=reverse' and '--divergence jsd' contradict"));
  return TH_PASS;
}
static int a_files_lines_follow_the_rules_and_name_their_line(void) {
  return th_in_tmpdir("cli-shape-file", file_in);
}

/* The modules a dry run would compile ("sm_80 <name> to compile" lines), in order. */
static void modules_of(char *dst, size_t cap) {
  dst[0] = '\0';
  for (const char *p = out; (p = strstr(p, " sm_")); p++) {
    const char *const end = strchr(p, '\n');
    if (!end || !strstr(p, "to compile") || strstr(p, "to compile") > end) continue;
    strncat(dst, p, (size_t)(end - p) < cap - strlen(dst) - 1 ? (size_t)(end - p)
                                                                : cap - strlen(dst) - 1);
  }
}

static int old_in(const char *dir) {
  static char words[8192], old[8192];
  TH_CHECK(cli("precompile --dry-run --arch sm_80 --cache-dir '%s' "
               "V=1000,H=64,fp16,logits,div=jsd,beta=0.5,hard=0.5,cap=30,tv=1024", dir) == 0);
  modules_of(words, sizeof words);
  TH_CHECK(cli("precompile --dry-run --arch sm_80 --cache-dir '%s' --vocab 1000 --hidden 64 "
               "--dtype fp16 --teacher logits --divergence jsd --beta 0.5 --hard-weight 0.5 "
               "--softcap 30 --teacher-ld 1024", dir) == 0);
  TH_CHECK(strstr(out, "note: --vocab is the old spelling of the SHAPE word V="));
  modules_of(old, sizeof old);
  TH_CHECK(words[0] && strcmp(words, old) == 0);
  /* the old loss options on a SHAPE, and their rules */
  TH_CHECK(cli("precompile --dry-run --arch sm_80 --cache-dir '%s' V=1000,H=64,fp16,logits "
               "--divergence jsd --beta 0.5 --hard-weight 0.5 --softcap 30 --teacher-ld 1024",
               dir) == 0);
  modules_of(old, sizeof old);
  TH_CHECK(strcmp(words, old) == 0);
  TH_CHECK(cli("precompile --dry-run --cache-dir '%s' --divergence jsd", dir) == 2);
  TH_CHECK(strstr(out, "'--divergence jsd' needs its parameter: add beta="));
  TH_CHECK(cli("precompile --dry-run --cache-dir '%s' --beta 0.5", dir) == 2);
  TH_CHECK(strstr(out, "'--beta 0.5' is the parameter of div=jsd"));
  TH_CHECK(cli("precompile --dry-run --cache-dir '%s' --divergence jsd --beta 0.1 --beta 0.2",
               dir) == 2);
  TH_CHECK(strstr(out, "--beta is given twice"));
  TH_CHECK(cli("demo --vocab 1000 --vocab 2000") == 2 && strstr(out, "--vocab is given twice"));
  TH_CHECK(cli("demo --teacher-bias --hidden 64 --vocab 1000") == 2);
  TH_CHECK(strstr(out, "'--teacher-bias' is the online teacher's bias"));
  return TH_PASS;
}
static int old_options_are_words_under_the_same_rules(void) {
  return th_in_tmpdir("cli-shape-old", old_in);
}

/* The names of kljit_problem's fields, from include/kljit.h. */
static int problem_fields(char names[64][48]) {
  const char *const src = getenv("KLJIT_SOURCE_DIR");
  if (!src) return 0;
  char path[PATH_MAX], line[512];
  snprintf(path, sizeof path, "%s/include/kljit.h", src);
  FILE *const f = fopen(path, "r");
  if (!f) return 0;
  int n = 0, in = 0;
  while (fgets(line, sizeof line, f) && n < 64) {
    if (!strncmp(line, "typedef struct kljit_problem {", 30)) in = 1;
    else if (in && !strncmp(line, "} kljit_problem;", 16)) break;
    else if (in) {
      char type[64], name[48];
      /* a type word, then the name before ';' ("  int64_t hidden;  ...") */
      if (sscanf(line, " %63s %47[a-z_0-9];", type, name) == 2 && strchr(line, ';') &&
          strcmp(name, "struct_size") != 0 &&
          line[strspn(line, " ")] != '/' && line[strspn(line, " ")] != '*')
        snprintf(names[n++], sizeof names[0], "%s", name);
    }
  }
  fclose(f);
  return n;
}

static int demo_in(const char *dir) {
  char names[64][48];
  const int n = problem_fields(names);
  TH_CHECK(n >= 31);
  TH_CHECK(cli("demo --arch sm_80 --cache-dir '%s' --rows 256 "
               "V=1000,H=64,hidden=32,tbias,div=jsd,beta=0.3,hard=0.5,cap=30,T=2",
               dir) == 0);
  TH_CHECK(strstr(out, "problem: V=1000,H=64,N=256,hidden=32,tbias,div=jsd,beta=0.3,hard=0.5,"
                       "cap=30,T=2\n"));
  for (int i = 0; i < n; i++) {
    char want[64];
    snprintf(want, sizeof want, " %.47s=", names[i]);
    if (!strstr(out, want)) {
      fprintf(stderr, "FAIL: kljit demo does not print the field %s\n", names[i]);
      return TH_FAIL;
    }
  }
  TH_CHECK(strstr(out, " teacher_hidden=32") && strstr(out, " beta=0.3"));
  TH_CHECK(strstr(out, " divergence=jsd") && strstr(out, " teacher=DENSE_HIDDEN"));
  printf("kljit demo printed all %d fields of kljit_problem\n", n);
  return TH_PASS;
}
static int demo_prints_every_field_of_the_problem_it_ran(void) {
  return th_in_tmpdir("cli-shape-demo", demo_in);
}

/* Issue 29's bar: a --file with one line per loss family (every divergence, the online teacher,
 * CE mixing and its extras, softcaps, row weights, the top-K divergences) compiles on a machine
 * without a GPU, and `kljit cache verify` accepts the result (its manifest and every entry). */
static int families_in(const char *dir) {
  char path[PATH_MAX], cache[PATH_MAX];
  th_path_in(path, dir, "families.txt");
  th_path_in(cache, dir, "cache");
  FILE *f = fopen(path, "w");
  TH_CHECK(f);
  fputs("# one line per loss family\n"
        "V=32000,H=64                                   # forward KL, dense probabilities\n"
        "V=32000,H=64,logprobs,div=reverse              # reverse KL\n"
        "V=32000,H=64,logits,div=jsd,beta=0.5,tt=2      # JSD, teacher logits\n"
        "V=32000,H=64,hidden=128,tbias,check            # online teacher, checked\n"
        "V=32000,H=64,hard=0.5,soft=0.5                 # CE mixing\n"
        "V=32000,H=64,logits,cap=30,tcap=50             # softcaps\n"
        "V=32000,H=64,topk=100,tail=bucket,div=jsd,beta=0.5  # top-K JSD (K + 1 categories)\n"
        "V=32000,H=64,topk=100,tail=renorm,div=reverse  # top-K reverse KL, renormalized\n"
        "V=32000,H=64,div=tvd,roww                      # TVD, row weights\n"
        "V=32000,H=64,logits,div=skew-forward,alpha=0.1 # skew forward KL\n"
        "V=32000,H=64,div=skew-reverse,alpha=0.1,hard=0.3,ls=0.1,zloss=1e-4  # CE extras\n"
        "V=32000,H=64,topk=100,tail=bucket,div=tvd      # top-K TVD\n"
        "V=32000,H=64,topk=100,tail=renorm,div=skew-reverse,alpha=0.2,hard=0.5,ls=0.1,zloss=1e-4\n",
        f);
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("precompile --arch sm_80,sm_90 --jobs 2 --cache-dir '%s' --file '%s'", cache,
               path) == 0);
  TH_CHECK(strstr(out, "manifest:") && strstr(out, "sm_80: ") && strstr(out, "sm_90: "));
  TH_CHECK(cli("cache verify --cache-dir '%s'", cache) == 0);
  TH_CHECK(strstr(out, " 0 problem(s)"));
  /* all of it was stored: a second run compiles nothing */
  TH_CHECK(cli("precompile --arch sm_80,sm_90 --cache-dir '%s' --file '%s'", cache, path) == 0);
  TH_CHECK(strstr(out, "sm_80: 0 module(s) compiled now") &&
           strstr(out, "sm_90: 0 module(s) compiled now"));
  return TH_PASS;
}
static int precompile_file_of_every_loss_family_compiles_and_cache_verify_accepts_it(void) {
  return th_in_tmpdir("cli-shape-families", families_in);
}

static const th_case cases[] = {
    {"precompile_file_of_every_loss_family_compiles_and_cache_verify_accepts_it",
     precompile_file_of_every_loss_family_compiles_and_cache_verify_accepts_it},
    {"every_word_round_trips_through_the_canonical_shape",
     every_word_round_trips_through_the_canonical_shape},
    {"each_rule_is_a_usage_error_naming_the_word", each_rule_is_a_usage_error_naming_the_word},
    {"a_files_lines_follow_the_rules_and_name_their_line",
     a_files_lines_follow_the_rules_and_name_their_line},
    {"old_options_are_words_under_the_same_rules", old_options_are_words_under_the_same_rules},
    {"demo_prints_every_field_of_the_problem_it_ran",
     demo_prints_every_field_of_the_problem_it_ran},
};
TH_MAIN(cases)
