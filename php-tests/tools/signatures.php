<?php
/**
 * Prints, as JSON, every class, interface and function of cronlock as
 * Reflection sees it. Run once with the extension loaded and once under
 * `php -n` with the stub file as argument: StubTest compares the two.
 */

declare(strict_types=1);

if (isset($argv[1])) {
    require $argv[1];
}

function type_of(?ReflectionType $type): ?string
{
    return $type === null ? null : (string) $type;
}

function describe_function(ReflectionFunctionAbstract $f): array
{
    $params = [];
    foreach ($f->getParameters() as $p) {
        $params[] = [
            'name' => $p->getName(),
            'type' => type_of($p->getType()),
            'optional' => $p->isOptional(),
            'default' => $p->isDefaultValueAvailable() ? var_export($p->getDefaultValue(), true) : null,
            'byRef' => $p->isPassedByReference(),
            'variadic' => $p->isVariadic(),
        ];
    }
    return ['params' => $params, 'return' => type_of($f->getReturnType())];
}

$out = ['classes' => [], 'functions' => []];
$names = array_merge(get_declared_classes(), get_declared_interfaces());
sort($names);
foreach ($names as $name) {
    if (!str_starts_with($name, 'CronLock\\')) {
        continue;
    }
    $c = new ReflectionClass($name);
    $methods = [];
    foreach ($c->getMethods() as $m) {
        if ($m->getDeclaringClass()->getName() !== $name) {
            continue; // inherited from Exception & co
        }
        $methods[$m->getName()] = describe_function($m) + [
            'static' => $m->isStatic(),
            'visibility' => $m->isPublic() ? 'public' : ($m->isProtected() ? 'protected' : 'private'),
            'abstract' => $m->isAbstract() && !$c->isInterface(),
        ];
    }
    ksort($methods);
    $interfaces = $c->getInterfaceNames();
    sort($interfaces);
    $out['classes'][$name] = [
        'kind' => $c->isInterface() ? 'interface' : 'class',
        'final' => $c->isFinal(),
        'parent' => $c->getParentClass() ? $c->getParentClass()->getName() : null,
        'interfaces' => $interfaces,
        'constants' => $c->getConstants(),
        'methods' => $methods,
    ];
}
foreach (get_defined_functions()[isset($argv[1]) ? 'user' : 'internal'] as $fn) {
    $f = new ReflectionFunction($fn);
    $ours = isset($argv[1]) ? $f->getFileName() === realpath($argv[1]) : $f->getExtensionName() === 'cronlock';
    if ($ours) {
        $out['functions'][$f->getName()] = describe_function($f);
    }
}
ksort($out['functions']);
echo json_encode($out, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES), "\n";
