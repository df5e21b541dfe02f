/* SPDX-License-Identifier: Apache-2.0 */
/* template.c — the kernel templates: their texts, and their syntax compiled into one Lua chunk
 * (the invariants are in template.h). */
#include "template.h"
#include "env.h"
#include "fs.h"

#include <string.h>

const template_file *template_embedded(const char *name) {
  const template_file *t = template_files;
  while (t->name && strcmp(t->name, name) != 0) t++;
  return t->name ? t : NULL;
}

const char *template_dir(void) {
  const char *dir = env_text(ENV_TEMPLATE_DIR);
  return dir && *dir ? dir : NULL;
}

/* Development mode: KLJIT_TEMPLATE_DIR=<dir> renders <dir>/<name> instead of the embedded copy,
 * so a template can be edited without rebuilding the library. Only a regular file below
 * TEMPLATE_FILE_MAX is read (fs_read_regular): a FIFO, a device (/dev/zero) or a symbolic link
 * to one is an error at once, not a hang or gigabytes read. */
enum { TEMPLATE_FILE_MAX = 4 << 20 };
kljit_status template_read_file(const char *dir, const char *name, strbuf *text) {
  strbuf path = {0};
  kljit_status st = sb_printf(&path, "%s/%s", dir, name);
  if (st != KLJIT_SUCCESS) return st;
  st = fs_read_regular(path.data, TEMPLATE_FILE_MAX, text, KLJIT_ERR_TEMPLATE,
                       "KLJIT_TEMPLATE_DIR file", NULL);
  if (st == KLJIT_SUCCESS) util_log("template %s read from %s", name, path.data);
  sb_free(&path);
  return st;
}

kljit_status template_text(const char *name, const char **dir, strbuf *storage,
                           const char **text, size_t *len) {
  if (!name || !*name || strchr(name, '/'))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "render_template: name must be a file name in templates/ (got %s%s%s)",
                   name ? "'" : "", name ? name : "NULL", name ? "'" : "");
  *dir = template_dir();
  if (*dir) {
    const kljit_status st = template_read_file(*dir, name, storage);
    *text = storage->data, *len = storage->len;
    return st;
  }
  const template_file *t = template_embedded(name);
  if (t) {
    *text = t->text, *len = t->len;
    return KLJIT_SUCCESS;
  }
  strbuf known = {0};
  kljit_status st = KLJIT_SUCCESS;
  for (const template_file *k = template_files; k->name && st == KLJIT_SUCCESS; k++)
    st = sb_printf(&known, "%s%s", k == template_files ? "" : ", ", k->name);
  if (st == KLJIT_SUCCESS)
    st = err_set(KLJIT_ERR_INVALID_ARGUMENT, "render_template: unknown template '%s' "
                 "(embedded: %s)", name, known.data ? known.data : "none");
  sb_free(&known);
  return st;
}

/* ---- compiling the template into a chunk -------------------------------------------------- */

/* A Lua string literal that holds exactly the given bytes on one source line: control bytes
 * as three-digit \ddd (so a following digit cannot extend the escape), tab kept as is. */
static kljit_status append_quoted(strbuf *lua, const char *s, size_t n) {
  kljit_status st = sb_append(lua, "\"", 1);
  for (size_t k = 0; k < n && st == KLJIT_SUCCESS; k++) {
    const unsigned char c = (unsigned char)s[k];
    if (c == '"' || c == '\\') {
      const char esc[2] = {'\\', (char)c};
      st = sb_append(lua, esc, 2);
    } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
      st = sb_printf(lua, "\\%03u", (unsigned)c);
    } else {
      st = sb_append(lua, (const char *)&c, 1);
    }
  }
  return st != KLJIT_SUCCESS ? st : sb_append(lua, "\"", 1);
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* One text line (without its '\n') -> `__kl_out(lit, (expr), lit, ..., lit)`. */
static kljit_status compile_text_line(const char *chunkname, int lineno, const char *line,
                                      size_t n, int has_newline, strbuf *lua) {
  kljit_status st = sb_append(lua, "__kl_out(", 9);
  size_t pos = 0;
  for (;;) {
    const char *open = NULL;
    for (size_t k = pos; k + 1 < n; k++)
      if (line[k] == '{' && line[k + 1] == '{') {
        open = line + k;
        break;
      }
    if (!open) break;
    const size_t o = (size_t)(open - line);
    size_t c = o + 2;
    while (c + 1 < n && !(line[c] == '}' && line[c + 1] == '}')) c++;
    if (c + 1 >= n)
      return err_set(KLJIT_ERR_TEMPLATE, "%s:%d: '{{' without a closing '}}' on the same line",
                     chunkname, lineno);
    size_t b = o + 2, e = c;
    while (b < e && is_blank(line[b])) b++;
    while (e > b && is_blank(line[e - 1])) e--;
    if (b == e) return err_set(KLJIT_ERR_TEMPLATE, "%s:%d: empty '{{ }}'", chunkname, lineno);
    if (st == KLJIT_SUCCESS) st = append_quoted(lua, line + pos, o - pos);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, ", (", 3);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, line + b, e - b);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, "), ", 3);
    pos = c + 2;
  }
  strbuf tail = {0};
  if (st == KLJIT_SUCCESS) st = sb_append(&tail, line + pos, n - pos);
  if (st == KLJIT_SUCCESS && has_newline) st = sb_append(&tail, "\n", 1);
  if (st == KLJIT_SUCCESS) st = append_quoted(lua, tail.data ? tail.data : "", tail.len);
  sb_free(&tail);
  return st != KLJIT_SUCCESS ? st : sb_append(lua, ")", 1);
}

/* A `%` line whose code is the call end_of_checks() alone (blanks around it allowed). */
static int is_end_of_checks(const char *code, size_t n) {
  static const char CALL[] = "end_of_checks()";
  size_t a = 0;
  while (a < n && is_blank(code[a])) a++;
  while (n > a && is_blank(code[n - 1])) n--;
  return n - a == sizeof CALL - 1 && memcmp(code + a, CALL, sizeof CALL - 1) == 0;
}

/* TEMPLATE_PROLOGUE stops at the first text line, or at an end_of_checks() line before it: Lua
 * then parses tens of lines, not the whole file, and a check that reaches the cut returns like
 * any chunk, with no text line to stop it (render.c's halt: an error, whose unwinding shrinks
 * the state's stack for the next check to grow again). */
kljit_status template_compile(const char *chunkname, const char *text, size_t len,
                              template_part part, strbuf *lua) {
  /* The prologue shares line 1 with the template's first line (invariant 1). */
  kljit_status st = sb_printf(lua, "local __kl_out = ...; ");
  int lineno = 1;
  for (size_t start = 0; start < len && st == KLJIT_SUCCESS; lineno++) {
    const char *nl = memchr(text + start, '\n', len - start);
    const size_t end = nl ? (size_t)(nl - text) : len;
    const char *line = text + start;
    size_t n = end - start, p = 0;
    while (p < n && is_blank(line[p])) p++;
    if (p < n && line[p] == '%') {
      /* A '\r' is a line break to Lua's lexer; keeping it would shift every later line. */
      if (n > p + 1 && line[n - 1] == '\r') n--;
      if (part == TEMPLATE_PROLOGUE && is_end_of_checks(line + p + 1, n - p - 1)) break;
      st = sb_append(lua, line + p + 1, n - p - 1);
    } else if (part == TEMPLATE_PROLOGUE) {
      break;
    } else {
      st = compile_text_line(chunkname, lineno, line, n, nl != NULL, lua);
    }
    if (st == KLJIT_SUCCESS) st = sb_append(lua, "\n", 1);
    start = end + 1;
  }
  return st;
}
