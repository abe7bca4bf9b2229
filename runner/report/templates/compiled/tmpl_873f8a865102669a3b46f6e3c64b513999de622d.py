from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'summary.md.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_s = resolve('s')
    l_0_max_listed = l_0_max_logs = l_0_cmp = l_0_cmp_jobs = l_0_by = l_0_order = l_0_failed = l_0_logs = l_0_chart = missing
    try:
        t_1 = environment.filters['cell']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'cell' found.")
    try:
        t_2 = environment.filters['duration']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'duration' found.")
    try:
        t_3 = environment.filters['fence']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'fence' found.")
    try:
        t_4 = environment.filters['gantt']
    except KeyError:
        @internalcode
        def t_4(*unused):
            raise TemplateRuntimeError("No filter named 'gantt' found.")
    try:
        t_5 = environment.filters['html_text']
    except KeyError:
        @internalcode
        def t_5(*unused):
            raise TemplateRuntimeError("No filter named 'html_text' found.")
    try:
        t_6 = environment.filters['human']
    except KeyError:
        @internalcode
        def t_6(*unused):
            raise TemplateRuntimeError("No filter named 'human' found.")
    try:
        t_7 = environment.filters['icon']
    except KeyError:
        @internalcode
        def t_7(*unused):
            raise TemplateRuntimeError("No filter named 'icon' found.")
    try:
        t_8 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_8(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    try:
        t_9 = environment.filters['length']
    except KeyError:
        @internalcode
        def t_9(*unused):
            raise TemplateRuntimeError("No filter named 'length' found.")
    try:
        t_10 = environment.filters['list']
    except KeyError:
        @internalcode
        def t_10(*unused):
            raise TemplateRuntimeError("No filter named 'list' found.")
    try:
        t_11 = environment.filters['money']
    except KeyError:
        @internalcode
        def t_11(*unused):
            raise TemplateRuntimeError("No filter named 'money' found.")
    try:
        t_12 = environment.filters['pct']
    except KeyError:
        @internalcode
        def t_12(*unused):
            raise TemplateRuntimeError("No filter named 'pct' found.")
    try:
        t_13 = environment.filters['rate']
    except KeyError:
        @internalcode
        def t_13(*unused):
            raise TemplateRuntimeError("No filter named 'rate' found.")
    try:
        t_14 = environment.filters['remote']
    except KeyError:
        @internalcode
        def t_14(*unused):
            raise TemplateRuntimeError("No filter named 'remote' found.")
    try:
        t_15 = environment.filters['selectattr']
    except KeyError:
        @internalcode
        def t_15(*unused):
            raise TemplateRuntimeError("No filter named 'selectattr' found.")
    pass
    l_0_max_listed = 100
    context.vars['max_listed'] = l_0_max_listed
    context.exported_vars.add('max_listed')
    l_0_max_logs = 20
    context.vars['max_logs'] = l_0_max_logs
    context.exported_vars.add('max_logs')
    l_0_cmp = environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'comparison')
    context.vars['cmp'] = l_0_cmp
    context.exported_vars.add('cmp')
    l_0_cmp_jobs = {}
    context.vars['cmp_jobs'] = l_0_cmp_jobs
    context.exported_vars.add('cmp_jobs')
    if (undefined(name='cmp') if l_0_cmp is missing else l_0_cmp):
        pass
        for l_1_j in environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'jobs'):
            l_1__ = missing
            _loop_vars = {}
            pass
            l_1__ = context.call(environment.getattr((undefined(name='cmp_jobs') if l_0_cmp_jobs is missing else l_0_cmp_jobs), 'update'), {environment.getattr(l_1_j, 'id'): l_1_j}, _loop_vars=_loop_vars)
            _loop_vars['_'] = l_1__
        l_1_j = l_1__ = missing
    yield '## '
    yield str(t_7(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'status')))
    yield ' '
    yield str(t_1(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'pipeline'), 'name')))
    yield ': '
    yield str(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'status'))
    yield '\n\n'
    l_0_by = environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs_by_status')
    context.vars['by'] = l_0_by
    context.exported_vars.add('by')
    l_0_order = ['passed', 'failed', 'timed_out', 'error', 'skipped', 'cancelled']
    context.vars['order'] = l_0_order
    context.exported_vars.add('order')
    yield '**'
    yield str(t_9(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs')))
    yield ' job'
    yield str(('s' if (t_9(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs')) != 1) else cond_expr_undefined("the inline if-expression on line 13 in 'summary.md.j2' evaluated to false and no else section was defined.")))
    yield '**'
    def t_16(fiter):
        for l_1_status in fiter:
            if context.call(environment.getattr((undefined(name='by') if l_0_by is missing else l_0_by), 'get'), l_1_status):
                yield l_1_status
    l_1_loop = missing
    for l_1_status, l_1_loop in LoopContext(t_16((undefined(name='order') if l_0_order is missing else l_0_order)), undefined):
        _loop_vars = {}
        pass
        yield str((':' if environment.getattr(l_1_loop, 'first') else ','))
        yield ' '
        yield str(environment.getitem((undefined(name='by') if l_0_by is missing else l_0_by), l_1_status))
        yield ' '
        yield str(t_6(l_1_status))
    l_1_loop = l_1_status = missing
    yield '\n'
    if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'total'):
        pass
        yield ' · **tests**: '
        yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'passed'))
        yield ' passed'
        if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'failures'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'failures'))
            yield ' failed'
        if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'errors'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'errors'))
            yield ' errored'
        if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'skipped'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'skipped'))
            yield ' skipped'
        if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'flaky_jobs'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'flaky_jobs'))
            yield ' flaky job'
            yield str(('s' if (environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tests'), 'flaky_jobs') != 1) else cond_expr_undefined("the inline if-expression on line 15 in 'summary.md.j2' evaluated to false and no else section was defined.")))
        yield '\n'
    yield ' · **cost**: '
    yield str(t_11(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'total_cost_usd')))
    if environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'budget_usd'):
        pass
        yield ' ('
        yield str(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'budget_used_pct'))
        yield '% of the '
        yield str(t_13(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'budget_usd')))
        yield ' budget)'
    yield ' · **time**: '
    yield str(t_2(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'duration_s')))
    yield ' · **backend**: '
    yield str(t_1(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'backend')))
    yield '\n'
    if (undefined(name='cmp') if l_0_cmp is missing else l_0_cmp):
        pass
        yield '\n**'
        yield str(t_12(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'cost_delta_pct')))
        yield ' GPU cost vs '
        yield str(t_1(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'label')))
        yield '** ('
        yield str(t_11(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'cost_usd')))
        yield ' vs '
        yield str(t_11(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'baseline_cost_usd')))
        yield '), **'
        yield str(t_12(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'duration_delta_pct')))
        yield ' time** ('
        yield str(t_2(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'duration_s')))
        yield ' vs '
        yield str(t_2(environment.getattr(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'total'), 'baseline_duration_s')))
        yield ')\n'
    yield '\n| Job | Status | GPU | Server | Time | $/h | Cost | Attempts |'
    if (undefined(name='cmp') if l_0_cmp is missing else l_0_cmp):
        pass
        yield ' Δ cost | Δ time |'
    yield ' Note |\n|---|---|---|---|--:|--:|--:|--:|'
    if (undefined(name='cmp') if l_0_cmp is missing else l_0_cmp):
        pass
        yield '--:|--:|'
    yield '---|\n'
    for l_1_j in environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs'):
        l_1_d = missing
        _loop_vars = {}
        pass
        l_1_d = context.call(environment.getattr((undefined(name='cmp_jobs') if l_0_cmp_jobs is missing else l_0_cmp_jobs), 'get'), environment.getattr(l_1_j, 'id'), _loop_vars=_loop_vars)
        _loop_vars['d'] = l_1_d
        yield '| '
        yield str(t_1(environment.getattr(l_1_j, 'name')))
        yield ' | '
        yield str(t_7(environment.getattr(l_1_j, 'status')))
        yield ' '
        yield str(t_6(environment.getattr(l_1_j, 'status')))
        if environment.getattr(l_1_j, 'allowed_failure'):
            pass
            yield ' (allowed)'
        elif environment.getattr(l_1_j, 'flaky'):
            pass
            yield ' (flaky)'
        yield ' | '
        yield str((t_14(environment.getattr(l_1_j, 'gpu')) or '–'))
        yield ' | '
        yield str((t_14((context.call(environment.getattr(environment.getattr(l_1_j, 'host'), 'get'), 'server_id', _loop_vars=_loop_vars) or environment.getattr(l_1_j, 'server'))) or '–'))
        yield ' | '
        yield str(t_2(environment.getattr(l_1_j, 'duration_s')))
        yield ' | '
        yield str(t_13(environment.getattr(l_1_j, 'usd_per_hour')))
        yield ' | '
        yield str(t_11(environment.getattr(l_1_j, 'cost_usd')))
        yield ' | '
        yield str(environment.getattr(l_1_j, 'attempts'))
        yield ' |'
        if (undefined(name='cmp') if l_0_cmp is missing else l_0_cmp):
            pass
            yield ' '
            yield str(t_12((environment.getattr((undefined(name='d') if l_1_d is missing else l_1_d), 'cost_delta_pct') if (undefined(name='d') if l_1_d is missing else l_1_d) else None)))
            yield ' | '
            yield str(t_12((environment.getattr((undefined(name='d') if l_1_d is missing else l_1_d), 'duration_delta_pct') if (undefined(name='d') if l_1_d is missing else l_1_d) else None)))
            yield ' |'
        yield ' '
        yield str(t_14(environment.getattr(l_1_j, 'reason')))
        yield ' |\n'
    l_1_j = l_1_d = missing
    l_0_failed = []
    context.vars['failed'] = l_0_failed
    context.exported_vars.add('failed')
    for l_1_j in environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs'):
        _loop_vars = {}
        pass
        for l_2_t in environment.getattr(l_1_j, 'failed_tests'):
            l_2__ = missing
            _loop_vars = {}
            pass
            l_2__ = context.call(environment.getattr((undefined(name='failed') if l_0_failed is missing else l_0_failed), 'append'), (l_1_j, l_2_t), _loop_vars=_loop_vars)
            _loop_vars['_'] = l_2__
        l_2_t = l_2__ = missing
    l_1_j = missing
    if (undefined(name='failed') if l_0_failed is missing else l_0_failed):
        pass
        yield '\n### Failed tests\n\n'
        for (l_1_j, l_1_t) in (undefined(name='failed') if l_0_failed is missing else l_0_failed)[:(undefined(name='max_listed') if l_0_max_listed is missing else l_0_max_listed)]:
            _loop_vars = {}
            pass
            yield '- '
            yield str(('💥' if (environment.getattr(l_1_t, 'kind') == 'error') else '❌'))
            yield ' **'
            yield str(t_1(environment.getattr(l_1_j, 'name')))
            yield '** · '
            yield str(('the job' if (environment.getattr(l_1_t, 'scope') == 'job') else t_14(str_join(((str_join((environment.getattr(l_1_t, 'classname'), '.', )) if environment.getattr(l_1_t, 'classname') else ''), environment.getattr(l_1_t, 'name'), )))))
            if environment.getattr(l_1_t, 'message'):
                pass
                yield ': '
                yield str(t_14(environment.getattr(l_1_t, 'message'), 300))
            yield '\n'
        l_1_j = l_1_t = missing
        if (t_9((undefined(name='failed') if l_0_failed is missing else l_0_failed)) > (undefined(name='max_listed') if l_0_max_listed is missing else l_0_max_listed)):
            pass
            yield '- … and '
            yield str((t_9((undefined(name='failed') if l_0_failed is missing else l_0_failed)) - (undefined(name='max_listed') if l_0_max_listed is missing else l_0_max_listed)))
            yield ' more in junit.xml\n'
    l_0_logs = t_10(context.eval_ctx, t_15(context, environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'jobs'), 'log_tail'))
    context.vars['logs'] = l_0_logs
    context.exported_vars.add('logs')
    if (undefined(name='logs') if l_0_logs is missing else l_0_logs):
        pass
        yield '\n### Logs of failed jobs\n'
        for l_1_j in (undefined(name='logs') if l_0_logs is missing else l_0_logs)[:(undefined(name='max_logs') if l_0_max_logs is missing else l_0_max_logs)]:
            l_1_text = missing
            _loop_vars = {}
            pass
            l_1_text = t_8(context.eval_ctx, environment.getattr(l_1_j, 'log_tail'), '\n')
            _loop_vars['text'] = l_1_text
            yield '\n<details><summary>'
            yield str(t_5(environment.getattr(l_1_j, 'name')))
            yield ': last '
            yield str(t_9(environment.getattr(l_1_j, 'log_tail')))
            yield ' lines of logs/'
            yield str(t_5(environment.getattr(l_1_j, 'id')))
            yield '.log</summary>\n\n'
            yield str(t_3((undefined(name='text') if l_1_text is missing else l_1_text)))
            yield 'text\n'
            yield str((undefined(name='text') if l_1_text is missing else l_1_text))
            yield '\n'
            yield str(t_3((undefined(name='text') if l_1_text is missing else l_1_text)))
            yield '\n\n</details>\n'
        l_1_j = l_1_text = missing
        if (t_9((undefined(name='logs') if l_0_logs is missing else l_0_logs)) > (undefined(name='max_logs') if l_0_max_logs is missing else l_0_max_logs)):
            pass
            yield '\n… and the logs of '
            yield str((t_9((undefined(name='logs') if l_0_logs is missing else l_0_logs)) - (undefined(name='max_logs') if l_0_max_logs is missing else l_0_max_logs)))
            yield ' more failed jobs in logs/\n'
    if environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'warnings'):
        pass
        yield '\n### Warnings\n\n'
        for l_1_w in environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'warnings'):
            _loop_vars = {}
            pass
            yield '- '
            yield str(t_1(l_1_w, 500))
            yield '\n'
        l_1_w = missing
    l_0_chart = t_4((undefined(name='s') if l_0_s is missing else l_0_s))
    context.vars['chart'] = l_0_chart
    context.exported_vars.add('chart')
    if (undefined(name='chart') if l_0_chart is missing else l_0_chart):
        pass
        yield '\n### Timeline\n\n```mermaid\n'
        yield str((undefined(name='chart') if l_0_chart is missing else l_0_chart))
        yield '```\n'
    yield '\n<sub>'
    if environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'ci'):
        pass
        yield '[CI run '
        yield str(t_1(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'ci'), 'run_id')))
        yield ']('
        yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'ci'), 'run_url'))
        yield ')'
        if environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'ci'), 'sha'):
            pass
            yield ' · commit '
            yield str(t_1(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'ci'), 'sha')[:7]))
        yield ' · '
    if ((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp) and environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'baseline_run_url')):
        pass
        yield '[baseline run]('
        yield str(environment.getattr((undefined(name='cmp') if l_0_cmp is missing else l_0_cmp), 'baseline_run_url'))
        yield ') · '
    yield 'clore-run '
    yield str(environment.getattr(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'tool'), 'version'))
    yield ' · started '
    yield str(environment.getattr((undefined(name='s') if l_0_s is missing else l_0_s), 'started_at'))
    yield '</sub>\n'

blocks = {}
debug_info = '4=103&5=106&6=109&7=112&8=115&9=125&11=131&12=134&13=138&14=157&15=160&17=185&18=194&19=198&21=201&24=216&25=220&26=224&27=228&28=231&30=266&31=269&32=280&36=283&37=287&39=298&40=301&43=303&44=306&47=309&48=313&50=316&52=322&53=324&54=326&58=329&60=332&63=334&67=337&68=341&71=344&72=347&77=350&80=353'