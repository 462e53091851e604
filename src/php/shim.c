/*
 * The engine internals cronlock needs that are C macros, inline functions or
 * layouts that change between PHP releases. Compiled by build.rs against the
 * target PHP's own headers, so the C compiler, not a copied constant, keeps
 * them right on every release. The Rust side is src/php/shim.rs.
 */

#include "php.h"
#include "zend_API.h"
#include "zend_attributes.h"
#include "zend_exceptions.h"
#include "zend_objects_API.h"
#include "zend_ini.h"
#include <signal.h>
#include <string.h>

/* ------------------------------------------------------------------ build */

const char *cronlock_php_version(void) { return PHP_VERSION; }

uint32_t cronlock_php_api(void) { return PHP_API_VERSION; }

bool cronlock_php_zts(void)
{
#ifdef ZTS
	return true;
#else
	return false;
#endif
}

/* --------------------------------------------------------------- signals */

/* The handler PHP runs for signo: with zend signals the one PHP records
 * (its own handler is what the OS calls), else the OS's. SIG_DFL is 0,
 * SIG_IGN 1 (as casts of those macros). */
void *cronlock_signal_handler(int signo)
{
	struct sigaction old;
	memset(&old, 0, sizeof(old));
#ifdef ZEND_SIGNALS
	zend_sigaction(signo, NULL, &old);
#else
	if (sigaction(signo, NULL, &old) != 0) {
		return (void *) SIG_IGN;
	}
#endif
	return (old.sa_flags & SA_SIGINFO) ? (void *) old.sa_sigaction : (void *) old.sa_handler;
}

/* Makes handler (an SA_SIGINFO handler, or SIG_DFL) the disposition of signo
 * the way pcntl_signal() does, so PHP's table and pcntl agree with it. */
void cronlock_signal_set(int signo, void *handler)
{
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	sigfillset(&act.sa_mask);
	if (handler == (void *) SIG_DFL) {
		act.sa_handler = SIG_DFL;
	} else {
		act.sa_flags = SA_SIGINFO;
		act.sa_sigaction = (void (*)(int, siginfo_t *, void *)) handler;
	}
#ifdef ZEND_SIGNALS
	zend_sigaction(signo, &act, NULL);
#else
	sigaction(signo, &act, NULL);
#endif
}

/* ------------------------------------------------------------ interrupts */

/* Whether the engine has work waiting at its next opcode: a pcntl signal
 * handler (pcntl_async_signals) or max_execution_time. false on a thread
 * that PHP did not start (ZTS: it has no executor globals). */
bool cronlock_vm_interrupted(void)
{
#ifdef ZTS
	if (tsrm_get_ls_cache() == NULL) {
		return false;
	}
#endif
#if PHP_VERSION_ID >= 80200
	return zend_atomic_bool_load_ex(&EG(vm_interrupt));
#else
	/* a plain bool before 8.2; volatile: read anew on every call */
	return *(volatile zend_bool *) &EG(vm_interrupt);
#endif
}

/* The address of this thread's EG(vm_interrupt), for a watchdog thread that
 * reads it while this thread blocks in a statement; NULL on a thread PHP did
 * not start. One byte: zend_atomic_bool from 8.2, zend_bool before. */
_Static_assert(sizeof(((zend_executor_globals *) 0)->vm_interrupt) == 1,
	"vm_interrupt is one byte");
const void *cronlock_vm_interrupt_flag(void)
{
#ifdef ZTS
	if (tsrm_get_ls_cache() == NULL) {
		return NULL;
	}
#endif
	return &EG(vm_interrupt);
}

/* ---------------------------------------------------------- object store */

/* Calls visit() with every live object of this request's object store. */
void cronlock_each_object(void (*visit)(zend_object *object))
{
	zend_objects_store *store = &EG(objects_store);
	if (store->object_buckets == NULL) {
		return;
	}
	for (uint32_t i = 1; i < store->top; i++) {
		zend_object *object = store->object_buckets[i];
		if (object != NULL && IS_OBJ_VALID(object)) {
			visit(object);
		}
	}
}

/* ------------------------------------------------------ post-startup hook */

static void (*post_startup_fn)(void);
static zend_result (*previous_post_startup)(void);
/* true while post_startup_fn runs from the hook, i.e. during startup */
static bool in_post_startup;

/* zend_post_startup_cb runs once after every module's MINIT (our classes are
 * registered by then) and, under ZTS, before the function and class tables
 * become the templates that each thread copies. */
static zend_result cronlock_post_startup(void)
{
	if (post_startup_fn != NULL) {
		in_post_startup = true;
		post_startup_fn();
		in_post_startup = false;
	}
	return previous_post_startup != NULL ? previous_post_startup() : SUCCESS;
}

void cronlock_on_post_startup(void (*fn)(void))
{
	post_startup_fn = fn;
	previous_post_startup = zend_post_startup_cb;
	zend_post_startup_cb = cronlock_post_startup;
}

/* ----------------------------------------------------------------- arginfo */

zend_function *cronlock_function(const char *name)
{
	return zend_hash_str_find_ptr_lc(CG(function_table), name, strlen(name));
}

zend_function *cronlock_method(const char *class_name, const char *method)
{
	zend_class_entry *ce = zend_hash_str_find_ptr_lc(CG(class_table), class_name, strlen(class_name));
	if (ce == NULL) {
		return NULL;
	}
	return zend_hash_str_find_ptr_lc(&ce->function_table, method, strlen(method));
}

/* The argument (0-based) or, for index -1, the return slot that internal
 * functions keep before the first argument; NULL when out of range. */
static zend_internal_arg_info *arg_info(zend_function *func, int32_t index)
{
	if (func == NULL || func->type != ZEND_INTERNAL_FUNCTION || func->internal_function.arg_info == NULL) {
		return NULL;
	}
	if (index < -1 || (index >= 0 && (uint32_t) index >= func->internal_function.num_args)) {
		return NULL;
	}
	return (zend_internal_arg_info *) &func->internal_function.arg_info[index];
}

static uint32_t scalar_mask(bool or_string, bool or_array, bool or_null)
{
	return (or_string ? MAY_BE_STRING : 0) | (or_array ? MAY_BE_ARRAY : 0) | (or_null ? MAY_BE_NULL : 0);
}

/* Sets a class type (optionally |string, |null) on an argument or the return. */
bool cronlock_arg_set_class(zend_function *func, int32_t index, const char *class_name,
	bool or_string, bool or_null, const char *default_value)
{
	zend_internal_arg_info *info = arg_info(func, index);
	if (info == NULL) {
		return false;
	}
	zend_string *name;
	if (in_post_startup) {
		/* What zend_register_functions() does for internal arginfo: a
		 * permanent interned string. opcache's post-startup hook, which
		 * runs ours first, then copies every arginfo class name into
		 * shared memory and releases the original; PHP 8.2's copy does not
		 * store the new pointer back (accel_copy_permanent_list_types
		 * takes the type by value), so a refcounted original would be
		 * freed while the arginfo still points at it, and shutdown would
		 * release it again. A release of an interned string is a no-op. */
		name = zend_string_init_interned(class_name, strlen(class_name), 1);
	} else {
		/* After startup (a php-fpm pool's php_admin_value[extension]),
		 * interned strings die with the request, and opcache no longer
		 * walks the function tables: persistent, released at shutdown. */
		name = zend_string_init(class_name, strlen(class_name), 1);
	}
	info->type = (zend_type) ZEND_TYPE_INIT_CLASS(name, or_null, scalar_mask(or_string, false, false));
	/* "" keeps a required argument required (a "" default crashes Reflection) */
	if (index >= 0 && default_value[0] != '\0') {
		info->default_value = default_value;
	}
	return true;
}

/* Sets a type of builtin types only: float, ?float, string, array. */
bool cronlock_arg_set_builtin(zend_function *func, int32_t index, bool is_float, bool is_string,
	bool is_array, bool or_null, const char *default_value)
{
	zend_internal_arg_info *info = arg_info(func, index);
	if (info == NULL) {
		return false;
	}
	uint32_t mask = scalar_mask(is_string, is_array, or_null) | (is_float ? MAY_BE_DOUBLE : 0);
	info->type = (zend_type) ZEND_TYPE_INIT_MASK(mask);
	/* "" keeps a required argument required (a "" default crashes Reflection) */
	if (index >= 0 && default_value[0] != '\0') {
		info->default_value = default_value;
	}
	return true;
}

#if PHP_VERSION_ID >= 80200
/* #[\SensitiveParameter] on argument `index` (0-based): traces show
 * Object(SensitiveParameterValue) instead of the value. */
bool cronlock_mark_sensitive(zend_function *func, uint32_t index)
{
	if (func == NULL || func->type != ZEND_INTERNAL_FUNCTION || index >= func->common.num_args) {
		return false;
	}
	zend_string *name = zend_string_init("SensitiveParameter", sizeof("SensitiveParameter") - 1, 1);
	zend_add_parameter_attribute(func, index, name, 0);
	zend_string_release(name);
	return true;
}
#endif

/* --------------------------------------------------------------- arguments */

/* The 1-based number of `arg` among the current call's arguments (ext-php-rs
 * hands us pointers into the call frame); 0 when it is not one of them. */
static uint32_t arg_num_of(const zval *arg)
{
	zend_execute_data *call = EG(current_execute_data);
	if (call == NULL) {
		return 0;
	}
	zval *first = ZEND_CALL_ARG(call, 1);
	uint32_t count = ZEND_CALL_NUM_ARGS(call);
	if (arg < first || arg >= first + count) {
		return 0;
	}
	return (uint32_t) (arg - first) + 1;
}

/* Each parser below does what ZEND_PARSE_PARAMETERS does for one argument
 * of an internal function: the caller's strict_types, weak-mode coercion
 * with the version's deprecations and warnings, and on failure the engine's
 * own TypeError. false means an exception is pending. */

bool cronlock_parse_double(zval *arg, double *dest, bool *is_null, bool allow_null)
{
	uint32_t num = arg_num_of(arg);
	bool null_given = false;
	if (zend_parse_arg_double(arg, dest, &null_given, allow_null, num)) {
		*is_null = allow_null && null_given;
		return true;
	}
	if (!EG(exception)) {
		zend_wrong_parameter_type_error(num, allow_null ? Z_EXPECTED_DOUBLE_OR_NULL : Z_EXPECTED_DOUBLE, arg);
	}
	return false;
}

/* On success *dest is the argument's string (coerced in place in the call
 * frame, as the engine does), or NULL for an allowed null. */
bool cronlock_parse_str(zval *arg, zend_string **dest, bool allow_null)
{
	uint32_t num = arg_num_of(arg);
	if (zend_parse_arg_str(arg, dest, allow_null, num)) {
		return true;
	}
	if (!EG(exception)) {
		zend_wrong_parameter_type_error(num, allow_null ? Z_EXPECTED_STRING_OR_NULL : Z_EXPECTED_STRING, arg);
	}
	return false;
}

/* `array $x`, as Z_PARAM_ARRAY_HT: an array and nothing else, null
 * included, in either mode. */
bool cronlock_parse_array(zval *arg)
{
	if (Z_TYPE_P(arg) == IS_ARRAY) {
		return true;
	}
	if (!EG(exception)) {
		zend_wrong_parameter_type_error(arg_num_of(arg), Z_EXPECTED_ARRAY, arg);
	}
	return false;
}

/* `array|string $x`, as Z_PARAM_ARRAY_HT_OR_STR: 2 for an array, 1 for a
 * string (*str, coerced in place in weak mode: int, float, bool, Stringable;
 * null deprecated, then ""), 0 when an exception is pending. */
int cronlock_parse_array_or_str(zval *arg, zend_string **str)
{
	uint32_t num = arg_num_of(arg);
	if (Z_TYPE_P(arg) == IS_ARRAY) {
		return 2;
	}
	if (zend_parse_arg_str(arg, str, false, num)) {
		return 1;
	}
	if (!EG(exception)) {
		zend_wrong_parameter_type_error(num, Z_EXPECTED_ARRAY_OR_STRING, arg);
	}
	return 0;
}

/* `Class|string $x` (allow_null: `Class|string|null`), as
 * Z_PARAM_OBJ_OF_CLASS_OR_STR(_OR_NULL): 3 for an object of the class (or
 * interface), 1 for a string (*str, coerced in place in weak mode), 4 for an
 * allowed null, 0 when an exception is pending. A class that is not loaded
 * (PDO without ext/pdo) leaves only the string. */
int cronlock_parse_class_or_str(zval *arg, const char *class_name, bool allow_null, zend_string **str)
{
	uint32_t num = arg_num_of(arg);
	zend_class_entry *ce = zend_hash_str_find_ptr_lc(EG(class_table), class_name, strlen(class_name));
	*str = NULL;
	if (ce != NULL && Z_TYPE_P(arg) == IS_OBJECT && instanceof_function(Z_OBJCE_P(arg), ce)) {
		return 3;
	}
	if (zend_parse_arg_str(arg, str, allow_null, num)) {
		return *str != NULL ? 1 : 4;
	}
	if (!EG(exception)) {
		if (allow_null) {
			zend_wrong_parameter_class_or_string_or_null_error(num, class_name, arg);
		} else {
			zend_wrong_parameter_class_or_string_error(num, class_name, arg);
		}
	}
	return 0;
}

/* The arguments of an `__unserialize(array $data)` call, as its zpp would
 * check them: false with the engine's ArgumentCountError or TypeError
 * pending. */
bool cronlock_parse_unserialize_args(zend_execute_data *execute_data)
{
	HashTable *data;
	ZEND_PARSE_PARAMETERS_START(1, 1)
		Z_PARAM_ARRAY_HT(data)
	ZEND_PARSE_PARAMETERS_END_EX(return false);
	(void) data;
	return true;
}

/* A callable argument, as Z_PARAM_FUNC checks it: on failure the engine's
 * "must be a valid callback, …" TypeError. */
bool cronlock_parse_callable(zval *arg)
{
	char *error = NULL;
	uint32_t num = arg_num_of(arg);
	if (zend_is_callable_ex(arg, NULL, 0, NULL, NULL, &error)) {
		if (error != NULL) {
			efree(error);
		}
		return true;
	}
	if (error != NULL) {
		zend_wrong_callback_error(num, error); /* frees error */
	} else if (!EG(exception)) {
		zend_wrong_parameter_type_error(num, Z_EXPECTED_FUNC, arg);
	}
	return false;
}

/* The current value of ini setting `name`, all *len bytes of it (a NUL
 * inside included, which zend_ini_string() would cut at); NULL when there is
 * no such setting or it has no value. */
const char *cronlock_ini_value(const char *name, size_t name_len, size_t *len)
{
	zend_ini_entry *entry = zend_hash_str_find_ptr(EG(ini_directives), name, name_len);
	if (entry == NULL || entry->value == NULL) {
		return NULL;
	}
	*len = ZSTR_LEN(entry->value);
	return ZSTR_VAL(entry->value);
}

/* PHP's current working directory into buf. Under ZTS, chdir() moves only
 * PHP's virtual cwd, not the process's, so the OS's getcwd() is not it. */
bool cronlock_php_cwd(char *buf, size_t len)
{
	return VCWD_GETCWD(buf, len) != NULL;
}

/* Builds that delay an out-of-memory error (Debian's PHP 8.2 backport:
 * ZEND_HAS_OOM) refuse every function call while EG(delayed_oom).state is
 * set. Lifts that refusal, returning the state to put back; -1 on builds
 * without it (or when nothing was refused). */
int cronlock_lift_delayed_oom(void)
{
#ifdef ZEND_HAS_OOM
	if (ZEND_HAS_OOM()) {
		int state = (int) EG(delayed_oom).state;
		EG(delayed_oom).state = ZEND_OOM_STATE_NONE;
		return state;
	}
#endif
	return -1;
}

/* Puts back what cronlock_lift_delayed_oom() returned. */
void cronlock_restore_delayed_oom(int state)
{
#ifdef ZEND_HAS_OOM
	if (state >= 0) {
		EG(delayed_oom).state = (zend_oom_state) state;
	}
#else
	(void) state;
#endif
}

/* ------------------------------------------------------------- warnings */

/* An E_WARNING with exactly this text: no php_error_docref() "function(): "
 * prefix, so that cronlock/polyfill's trigger_error() says the same. */
void cronlock_warning(const char *message)
{
	zend_error(E_WARNING, "%s", message);
}
